"""A supervision row may be ``handed_off``: its producer released it at a shutdown (epoch + 1).

The turn is open but held by no producer, so a resume claims it at once (no ``DEAD_AFTER`` to
wait for). The status check constraint admits the new value; the partial index of running rows
is unchanged (a handed-off row is not heartbeated).
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('agent_persistence', '0019_conversation_thread_revision'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='turnsupervision',
            name='ap_supervision_status_valid',
        ),
        migrations.AlterField(
            model_name='turnsupervision',
            name='status',
            field=models.CharField(choices=[('running', 'running'), ('done', 'done'), ('errored', 'errored'), ('handed_off', 'handed off')], default='running', max_length=16),
        ),
        migrations.AddConstraint(
            model_name='turnsupervision',
            constraint=models.CheckConstraint(condition=models.Q(('status__in', ['running', 'done', 'errored', 'handed_off'])), name='ap_supervision_status_valid'),
        ),
    ]
