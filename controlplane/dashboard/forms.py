"""Forms of the dashboard pages; they only parse, services decide."""

from django import forms

from controlplane.accounts.roles import Role
from controlplane.params import codec
from controlplane.params.schema import TIERS


class TemplateCreateForm(forms.Form):
    name = forms.CharField(max_length=64)
    description = forms.CharField(max_length=500, required=False)


class VersionEditForm(forms.Form):
    text = forms.CharField(widget=forms.Textarea, strip=False)
    format = forms.ChoiceField(choices=[(f, f.upper()) for f in codec.FORMATS], initial="yaml")
    base_version = forms.IntegerField(min_value=0, required=False)
    comment = forms.CharField(max_length=500, required=False)


class ImportForm(forms.Form):
    file = forms.FileField()
    base_version = forms.IntegerField(min_value=0, required=False)
    comment = forms.CharField(max_length=500, required=False)


class WhitelistForm(forms.Form):
    scenarios = forms.CharField(help_text="Comma- or newline-separated scenario names")
    base_version = forms.IntegerField(min_value=1, required=False)
    comment = forms.CharField(max_length=500, required=False)
    name = forms.CharField(max_length=64, required=False)
    description = forms.CharField(max_length=500, required=False)

    def scenario_list(self) -> list[str]:
        raw = self.cleaned_data["scenarios"].replace("\n", ",")
        return [item.strip() for item in raw.split(",") if item.strip()]


class PoolCreateForm(forms.Form):
    name = forms.CharField(max_length=64)
    description = forms.CharField(max_length=500, required=False)
    is_production = forms.BooleanField(required=False)


class PublishForm(forms.Form):
    version = forms.CharField(help_text="template:number")
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}))
    override_reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False)


class RollbackForm(forms.Form):
    version = forms.CharField(required=False, help_text="template:number; empty for the previous version")
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}))


class UserCreateForm(forms.Form):
    username = forms.RegexField(regex=r"^[\w.@+-]{1,150}$")
    password = forms.CharField(widget=forms.PasswordInput)
    role = forms.ChoiceField(choices=Role.choices)


class UserUpdateForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)
    is_active = forms.BooleanField(required=False)
    reason = forms.CharField(max_length=500, required=False)


class NodeCreateForm(forms.Form):
    name = forms.CharField(max_length=64)
    pool = forms.CharField(max_length=64)
    description = forms.CharField(max_length=500, required=False)


ALL_POOLS = "__all__"  # not a pool slug: slugs start with a letter or digit


class OverrideForm(forms.Form):
    """A conversation override: the pool is chosen explicitly, "all pools" included, never by default."""

    pool = forms.ChoiceField()
    conversation = forms.CharField(max_length=128)
    tier = forms.ChoiceField(required=False)
    temperature = forms.FloatField(required=False)
    reason = forms.CharField(max_length=2000)
    expires_in_minutes = forms.IntegerField(initial=30)

    def __init__(self, *args, pools=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["pool"].choices = [("", "choose…"), (ALL_POOLS, "all pools")] + [(p, p) for p in pools]
        self.fields["tier"].choices = [("", "none: set a temperature")] + [(t, t) for t in TIERS]


class IntentDatasetUploadForm(forms.Form):
    name = forms.CharField(max_length=64)
    description = forms.CharField(max_length=500, required=False)
    file = forms.FileField()
    format = forms.ChoiceField(
        choices=[("", "from the file name"), ("csv", "CSV"), ("jsonl", "JSON Lines")], required=False
    )


class IntentTrainForm(forms.Form):
    epochs = forms.IntegerField(min_value=1, max_value=50, initial=12)


class IntentPublishForm(forms.Form):
    pool = forms.CharField(max_length=64)
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}))


class IntentRevertForm(forms.Form):
    reason = forms.CharField(max_length=2000)


class WarmupUploadForm(forms.Form):
    source = forms.ChoiceField(
        choices=[
            ("upload", "Messages to replay as they are (CSV or JSON Lines)"),
            ("conversation_log", "A conversation log: keep its most frequent user queries"),
        ],
        initial="upload",
    )
    file = forms.FileField()
    format = forms.ChoiceField(
        choices=[("", "from the file name"), ("csv", "CSV"), ("jsonl", "JSON Lines")], required=False
    )
    top_n = forms.IntegerField(min_value=1, max_value=5000, required=False)
    comment = forms.CharField(max_length=500, required=False)


class WarmupDatasetCreateForm(WarmupUploadForm):
    name = forms.CharField(max_length=64)
    description = forms.CharField(max_length=500, required=False)


class WarmupVersionForm(WarmupUploadForm):
    base_version = forms.IntegerField(min_value=1)


class WarmupAssignForm(forms.Form):
    pool = forms.CharField(max_length=64)
    version = forms.IntegerField(min_value=1)
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}))


SILENCE_DURATIONS = [(30, "30 minutes"), (60, "1 hour"), (240, "4 hours"), (720, "12 hours"), (1440, "24 hours")]


class AcknowledgeForm(forms.Form):
    note = forms.CharField(max_length=2000, required=False)


class SilenceForm(forms.Form):
    rule = forms.CharField(max_length=64, required=False)
    pool = forms.CharField(max_length=64, required=False)
    node = forms.CharField(max_length=64, required=False)
    duration_minutes = forms.TypedChoiceField(choices=SILENCE_DURATIONS, coerce=int, initial=60)
    reason = forms.CharField(max_length=2000)


class SilenceExpireForm(forms.Form):
    reason = forms.CharField(max_length=2000)


class AlertRuleForm(forms.Form):
    """A new version of an alert rule; the service checks metric, scope, thresholds and runbook."""

    base_version = forms.IntegerField(min_value=1)
    metric = forms.CharField(max_length=64)
    scope = forms.CharField(max_length=8)
    comparison = forms.CharField(max_length=2)
    warn = forms.FloatField()
    critical = forms.FloatField(required=False)
    for_s = forms.IntegerField(min_value=0)
    runbook = forms.CharField(max_length=64)
    summary = forms.CharField(max_length=300)
    is_enabled = forms.BooleanField(required=False)
    comment = forms.CharField(max_length=500, required=False)


class ModelEntryForm(forms.Form):
    """Register (with a name) or edit (with a reason) a model catalog entry; the service checks every value."""

    name = forms.CharField(max_length=64, required=False)
    source = forms.CharField(max_length=512)
    tokenizer = forms.CharField(max_length=512, required=False)
    revision = forms.CharField(max_length=128, required=False)
    tokenizer_revision = forms.CharField(max_length=128, required=False)
    is_draft_capable = forms.BooleanField(required=False)
    trust_remote_code = forms.BooleanField(required=False)
    description = forms.CharField(max_length=500, required=False)
    reason = forms.CharField(max_length=500, required=False)

    ENTRY_FIELDS = (
        "source",
        "tokenizer",
        "revision",
        "tokenizer_revision",
        "is_draft_capable",
        "trust_remote_code",
        "description",
    )

    def entry_values(self) -> dict:
        return {key: self.cleaned_data[key] for key in self.ENTRY_FIELDS}
