"""Pool degradation: one state row per pool and the history of its transitions."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('nodes', '0004_node_command_cleanup'),
        ('operations', '0001_initial'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='DegradationEvent',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('kind', models.CharField(choices=[('entered', 'Entered'), ('left', 'Left')], max_length=8)),
                ('cause', models.CharField(choices=[('manual', 'Manual'), ('automatic', 'Automatic')], max_length=16)),
                ('reason', models.TextField()),
                ('load', models.FloatField(blank=True, null=True)),
                ('at', models.DateTimeField(db_index=True)),
                ('actor', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('pool', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='degradation_events', to='nodes.pool')),
            ],
            options={
                'ordering': ['-at', '-id'],
            },
        ),
        migrations.CreateModel(
            name='PoolDegradation',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('is_active', models.BooleanField(default=False)),
                ('cause', models.CharField(blank=True, choices=[('manual', 'Manual'), ('automatic', 'Automatic')], max_length=16)),
                ('reason', models.TextField(blank=True)),
                ('since', models.DateTimeField(blank=True, null=True)),
                ('load', models.FloatField(blank=True, null=True)),
                ('load_at', models.DateTimeField(blank=True, null=True)),
                ('load_above_since', models.DateTimeField(blank=True, null=True)),
                ('load_below_since', models.DateTimeField(blank=True, null=True)),
                ('changed_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('pool', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='degradation', to='nodes.pool')),
            ],
        ),
    ]
