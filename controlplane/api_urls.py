"""Every REST route of the control plane, in one visible list under /api/v1/."""

from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from controlplane.accounts import api as accounts
from controlplane.advice import api as advice
from controlplane.alerts import api as alerts
from controlplane.audit import api as audit
from controlplane.catalog import api as catalog
from controlplane.convlogs import api as convlogs
from controlplane.datasets import api as datasets
from controlplane.impact import api as impact
from controlplane.metrics import api as metrics
from controlplane.nodes import api as nodes
from controlplane.nodes import client_key_api as client_keys
from controlplane.nodes import node_api as engine_nodes
from controlplane.operations import api as operations
from controlplane.params import api as params
from controlplane.replays import api as replays
from controlplane.replays import comparison_api as replay_comparisons
from controlplane.tuning import api as tuning

urlpatterns = [
    path("auth/token/", accounts.TokenIssue.as_view(), name="token-issue"),
    path("me/", accounts.Me.as_view(), name="me"),
    path("users/", accounts.UserList.as_view(), name="user-list"),
    path("users/<str:username>/", accounts.UserDetail.as_view(), name="user-detail"),
    path("fields/", params.FieldSpecList.as_view(), name="field-list"),
    path("validate/", params.DocumentValidate.as_view(), name="document-validate"),
    path("templates/", params.TemplateList.as_view(), name="template-list"),
    path("templates/<slug:name>/", params.TemplateDetail.as_view(), name="template-detail"),
    path("templates/<slug:name>/versions/", params.TemplateVersionList.as_view(), name="template-version-list"),
    path("templates/<slug:name>/suggestions/", advice.TemplateSuggestions.as_view(), name="template-suggestions"),
    path(
        "templates/<slug:name>/suggestions/apply/",
        advice.TemplateSuggestionApply.as_view(),
        name="template-suggestion-apply",
    ),
    path("templates/<slug:name>/import/", params.TemplateImport.as_view(), name="template-import"),
    path("templates/<slug:name>/diff/", params.TemplateDiff.as_view(), name="template-diff"),
    path(
        "templates/<slug:name>/versions/<int:number>/",
        params.TemplateVersionDetail.as_view(),
        name="template-version-detail",
    ),
    path(
        "templates/<slug:name>/versions/<int:number>/explain/",
        params.TemplateVersionExplain.as_view(),
        name="template-version-explain",
    ),
    path(
        "templates/<slug:name>/versions/<int:number>/export/",
        params.TemplateVersionExport.as_view(),
        name="template-version-export",
    ),
    path("models/", catalog.ModelEntryList.as_view(), name="model-list"),
    path("models/<str:name>/", catalog.ModelEntryDetail.as_view(), name="model-detail"),
    path("whitelists/", params.WhitelistList.as_view(), name="whitelist-list"),
    path("whitelists/<slug:name>/", params.WhitelistDetail.as_view(), name="whitelist-detail"),
    path("whitelists/<slug:name>/versions/", params.WhitelistVersionList.as_view(), name="whitelist-version-list"),
    path("impact-records/", impact.ImpactRecordList.as_view(), name="impact-record-list"),
    path("impact-records/<int:pk>/", impact.ImpactRecordDetail.as_view(), name="impact-record-detail"),
    path("pools/", nodes.PoolList.as_view(), name="pool-list"),
    path("pools/<slug:name>/", nodes.PoolDetail.as_view(), name="pool-detail"),
    path("pools/<slug:name>/suggestions/", advice.PoolSuggestions.as_view(), name="pool-suggestions"),
    path("pools/<slug:name>/suggestions/apply/", advice.PoolSuggestionApply.as_view(), name="pool-suggestion-apply"),
    path("pools/<slug:name>/releases/", nodes.PoolReleaseList.as_view(), name="pool-release-list"),
    path("pools/<slug:name>/publish/", nodes.PoolPublish.as_view(), name="pool-publish"),
    path("pools/<slug:name>/rollback/", nodes.PoolRollback.as_view(), name="pool-rollback"),
    path("pools/<slug:name>/rollback-preview/", nodes.PoolRollbackPreview.as_view(), name="pool-rollback-preview"),
    path("pools/<slug:name>/rollout/", engine_nodes.PoolRollout.as_view(), name="pool-rollout"),
    path("pools/<slug:name>/canary/", engine_nodes.PoolCanary.as_view(), name="pool-canary"),
    path("pools/<slug:name>/gate/", engine_nodes.PoolGate.as_view(), name="pool-gate"),
    path("pools/<slug:name>/cleanup/", engine_nodes.PoolCleanup.as_view(), name="pool-cleanup"),
    path("client-keys/", client_keys.ClientKeyList.as_view(), name="client-key-list"),
    path("client-keys/<int:pk>/revoke/", client_keys.ClientKeyRevoke.as_view(), name="client-key-revoke"),
    path("nodes/", engine_nodes.NodeList.as_view(), name="node-list"),
    path("nodes/<slug:name>/", engine_nodes.NodeDetail.as_view(), name="node-detail"),
    path("nodes/<slug:name>/token/", engine_nodes.NodeTokenRotate.as_view(), name="node-token-rotate"),
    path("nodes/<slug:name>/revoke/", engine_nodes.NodeTokenRevoke.as_view(), name="node-token-revoke"),
    path("nodes/<slug:name>/commands/", engine_nodes.NodeCommandList.as_view(), name="node-command-list"),
    path("overrides/", operations.OverrideList.as_view(), name="override-list"),
    path("overrides/<int:pk>/revoke/", operations.OverrideRevoke.as_view(), name="override-revoke"),
    path("pools/<slug:name>/degradation/", operations.PoolDegradationView.as_view(), name="pool-degradation"),
    path("intent-datasets/", datasets.IntentDatasetList.as_view(), name="intent-dataset-list"),
    path("intent-datasets/<slug:name>/", datasets.IntentDatasetDetail.as_view(), name="intent-dataset-detail"),
    path("intent-datasets/<slug:name>/models/", datasets.IntentModelList.as_view(), name="intent-model-list"),
    path(
        "intent-datasets/<slug:name>/models/<int:number>/",
        datasets.IntentModelDetail.as_view(),
        name="intent-model-detail",
    ),
    path("intent-releases/", datasets.IntentModelReleaseList.as_view(), name="intent-release-list"),
    path("conversation-logs/", convlogs.ConversationLogList.as_view(), name="conversation-log-list"),
    path("conversation-logs/import/", convlogs.ConversationLogImport.as_view(), name="conversation-log-import"),
    path("conversation-logs/<slug:name>/", convlogs.ConversationLogDetail.as_view(), name="conversation-log-detail"),
    path("conversation-logs/<slug:name>/analyses/", convlogs.LogAnalysisList.as_view(), name="log-analysis-list"),
    path(
        "conversation-logs/<slug:name>/analyses/<int:pk>/",
        convlogs.LogAnalysisDetail.as_view(),
        name="log-analysis-detail",
    ),
    path(
        "conversation-logs/<slug:name>/analyses/<int:pk>/apply/",
        convlogs.LogAnalysisApply.as_view(),
        name="log-analysis-apply",
    ),
    path("warmup-datasets/", datasets.WarmupDatasetList.as_view(), name="warmup-dataset-list"),
    path("warmup-datasets/<slug:name>/", datasets.WarmupDatasetDetail.as_view(), name="warmup-dataset-detail"),
    path("warmup-datasets/<slug:name>/versions/", datasets.WarmupVersionList.as_view(), name="warmup-version-list"),
    path(
        "warmup-datasets/<slug:name>/versions/<int:number>/",
        datasets.WarmupVersionDetail.as_view(),
        name="warmup-version-detail",
    ),
    path("warmup-assignments/", datasets.PoolWarmupList.as_view(), name="warmup-assignment-list"),
    path("metrics/<slug:scope>/<slug:name>/", metrics.MetricHistory.as_view(), name="metric-history"),
    path("alert-rules/", alerts.AlertRuleList.as_view(), name="alert-rule-list"),
    path("alert-rules/<slug:name>/", alerts.AlertRuleDetail.as_view(), name="alert-rule-detail"),
    path("alert-rules/<slug:name>/versions/", alerts.AlertRuleVersionList.as_view(), name="alert-rule-version-list"),
    path("alerts/", alerts.AlertList.as_view(), name="alert-list"),
    path("alerts/no-source/", alerts.NoSourceList.as_view(), name="alert-no-source-list"),
    path("incidents/", alerts.IncidentList.as_view(), name="incident-list"),
    path("incidents/<int:pk>/", alerts.IncidentDetail.as_view(), name="incident-detail"),
    path("incidents/<int:pk>/ack/", alerts.IncidentAcknowledge.as_view(), name="incident-ack"),
    path("silences/", alerts.SilenceList.as_view(), name="silence-list"),
    path("silences/<int:pk>/expire/", alerts.SilenceExpire.as_view(), name="silence-expire"),
    path("replays/", replays.ReplayRunList.as_view(), name="replay-list"),
    path("replays/<int:pk>/", replays.ReplayRunDetail.as_view(), name="replay-detail"),
    path("replays/<int:pk>/cancel/", replays.ReplayRunCancel.as_view(), name="replay-cancel"),
    path("replays/<int:pk>/requests/", replays.ReplayRequestList.as_view(), name="replay-request-list"),
    path("replays/<int:pk>/export/", replays.ReplayRequestExport.as_view(), name="replay-request-export"),
    path("replays/<int:pk>/figures/", replay_comparisons.RunFigures.as_view(), name="replay-figures"),
    path(
        "replays/<int:pk>/figures/export/",
        replay_comparisons.RunFiguresExport.as_view(),
        name="replay-figures-export",
    ),
    path(
        "replays/<int:pk>/figures/requests/",
        replay_comparisons.RunFigureRequests.as_view(),
        name="replay-figure-requests",
    ),
    path("replay-comparisons/", replay_comparisons.ComparisonList.as_view(), name="replay-comparison-list"),
    path(
        "replay-comparisons/<int:pk>/", replay_comparisons.ComparisonDetail.as_view(), name="replay-comparison-detail"
    ),
    path(
        "replay-comparisons/<int:pk>/export/",
        replay_comparisons.ComparisonExport.as_view(),
        name="replay-comparison-export",
    ),
    path("tuning-studies/", tuning.StudyList.as_view(), name="tuning-study-list"),
    path("tuning-studies/<int:pk>/", tuning.StudyDetail.as_view(), name="tuning-study-detail"),
    path("tuning-studies/<int:pk>/cancel/", tuning.StudyCancel.as_view(), name="tuning-study-cancel"),
    path("audit/", audit.AuditList.as_view(), name="audit-list"),
    path("audit/export.csv", audit.AuditExport.as_view(), name="audit-export"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api:schema"), name="docs"),
]
