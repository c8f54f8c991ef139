"""Every page of the dashboard."""

from django.contrib.auth import views as auth_views
from django.urls import path

from controlplane.dashboard.views import (
    accounts,
    audit,
    fleet,
    intents,
    operations,
    overview,
    pools,
    templates,
    whitelists,
)

app_name = "dashboard"
urlpatterns = [
    path("login/", auth_views.LoginView.as_view(template_name="dashboard/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", overview.overview, name="overview"),
    path("templates/", templates.template_list, name="templates"),
    path("templates/<slug:name>/", templates.template_detail, name="template-detail"),
    path("templates/<slug:name>/edit/", templates.template_edit, name="template-edit"),
    path("templates/<slug:name>/import/", templates.template_import, name="template-import"),
    path("templates/<slug:name>/diff/", templates.template_diff, name="template-diff"),
    path("templates/<slug:name>/v<int:number>/", templates.version_detail, name="version-detail"),
    path("templates/<slug:name>/v<int:number>/export/", templates.version_export, name="version-export"),
    path("whitelists/", whitelists.whitelist_list, name="whitelists"),
    path("whitelists/<slug:name>/", whitelists.whitelist_edit, name="whitelist-edit"),
    path("pools/", pools.pool_list, name="pools"),
    path("pools/<slug:name>/", pools.pool_detail, name="pool-detail"),
    path("pools/<slug:name>/publish/", pools.pool_publish, name="pool-publish"),
    path("pools/<slug:name>/rollback/", pools.pool_rollback, name="pool-rollback"),
    path("fleet/", fleet.fleet, name="fleet"),
    path("nodes/<slug:name>/", fleet.node_detail, name="node-detail"),
    path("nodes/<slug:name>/command/", fleet.node_command, name="node-command"),
    path("nodes/<slug:name>/token/", fleet.node_token, name="node-token"),
    path("overrides/", operations.override_list, name="overrides"),
    path("overrides/<int:pk>/revoke/", operations.override_revoke, name="override-revoke"),
    path("intents/", intents.intent_overview, name="intents"),
    path("intents/datasets/<slug:name>/", intents.intent_dataset, name="intent-dataset"),
    path("intents/datasets/<slug:name>/models/<int:number>/", intents.intent_model, name="intent-model"),
    path("intents/datasets/<slug:name>/models/<int:number>/publish/", intents.intent_publish, name="intent-publish"),
    path("intents/pools/<slug:name>/built-in/", intents.intent_builtin, name="intent-builtin"),
    path("audit/", audit.audit_log, name="audit"),
    path("users/", accounts.user_list, name="users"),
    path("users/<str:username>/", accounts.user_update, name="user-update"),
]
