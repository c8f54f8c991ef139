from django.db import migrations, models

# The line every ladder run was judged against before runs carried their own (controlplane/replays/sustained.py).
REPORT_LINE_S = 1.8


def name_the_line_of_earlier_ladders(apps, schema_editor):
    ReplayRun = apps.get_model("replays", "ReplayRun")
    ReplayRun.objects.filter(pacing="ladder", slo_p99_s__isnull=True).update(slo_p99_s=REPORT_LINE_S)


class Migration(migrations.Migration):
    dependencies = [
        ("replays", "0004_first_round_and_ladder"),
    ]

    operations = [
        migrations.AddField(
            model_name="replayrun",
            name="slo_p99_s",
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.RunPython(name_the_line_of_earlier_ladders, migrations.RunPython.noop),
    ]
