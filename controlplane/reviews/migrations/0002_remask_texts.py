"""Every stored review text masked again with the masker this release ships (controlplane/reviews/remask.py): rows
stored before it learned dotted and ideographic-space phone numbers, fullwidth digits, IBANs and grouped card numbers
keep no such customer data."""

from django.db import migrations


def remask(apps, schema_editor):
    from controlplane.reviews.remask import remask_review_items

    remask_review_items(apps.get_model("reviews", "ReviewItem"))


class Migration(migrations.Migration):
    dependencies = [("reviews", "0001_initial")]

    operations = [migrations.RunPython(remask, migrations.RunPython.noop)]
