"""REST endpoints for alert rules (versioned), alerts, incidents (acknowledge) and silences."""

from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, status
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.accounts.roles import Action
from controlplane.alerts import coverage, selectors, serializers
from controlplane.alerts.models import Alert, AlertGroup, AlertRule, AlertRuleVersion, Silence
from controlplane.alerts.services import lifecycle, rules
from controlplane.lib.errors import InvalidField
from controlplane.lib.openapi import conflict
from controlplane.lib.serializers import query_flag, validated
from controlplane.nodes.models import EngineNode


class AlertRuleList(generics.ListAPIView):
    """Every rule as its newest version says; POST adds a rule (version 1)."""

    serializer_class = serializers.AlertRuleVersionSerializer
    required_action = Action.ALERT_RULE_WRITE

    def get_queryset(self):
        return selectors.current_rule_versions()

    @extend_schema(
        request=serializers.AlertRuleCreateSerializer,
        responses={201: serializers.AlertRuleVersionSerializer, 409: conflict("A rule with that name exists.")},
    )
    def post(self, request):
        data = validated(serializers.AlertRuleCreateSerializer, request.data)
        version = rules.alert_rule_create(actor=request.user, **data)
        return Response(serializers.AlertRuleVersionSerializer(version).data, status=status.HTTP_201_CREATED)


class AlertRuleDetail(APIView):
    """The rule's newest version."""

    @extend_schema(responses=serializers.AlertRuleVersionSerializer)
    def get(self, request, name):
        rule = get_object_or_404(AlertRule, name=name)
        return Response(serializers.AlertRuleVersionSerializer(selectors.rule_current_version(rule)).data)


class AlertRuleVersionList(generics.ListAPIView):
    """Every version of one rule, newest first; POST saves the next one (409 on a stale base)."""

    serializer_class = serializers.AlertRuleVersionSerializer
    required_action = Action.ALERT_RULE_WRITE

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema generator has no rule name
            return AlertRuleVersion.objects.none()
        rule = get_object_or_404(AlertRule, name=self.kwargs["name"])
        return rule.versions.select_related("rule", "author")

    @extend_schema(
        request=serializers.AlertRuleVersionCreateSerializer,
        responses={
            201: serializers.AlertRuleVersionSerializer,
            409: conflict("`base_version` is not the latest version any more (code `stale_base_version`)."),
        },
    )
    def post(self, request, name):
        rule = get_object_or_404(AlertRule, name=name)
        data = validated(serializers.AlertRuleVersionCreateSerializer, request.data)
        base_number = data.pop("base_version")
        base = rule.versions.filter(number=base_number).first() if base_number else None
        if base_number and base is None:
            raise InvalidField("base_version", f"rule {name} has no version {base_number}")
        fields = {**(base.fields() if base else {}), **data}
        version = rules.alert_rule_version_create(actor=request.user, rule=rule, base_number=base_number, **fields)
        return Response(serializers.AlertRuleVersionSerializer(version).data, status=status.HTTP_201_CREATED)


class NoSourceList(APIView):
    """Node rules that cannot watch a node because the node has no source for their figure (the vLLM CPU build has no
    fragmentation reading, a host without a DCGM exporter no SM activity), each with the node's reason: such a rule is
    "no source" on that node, never healthy. From each node's newest fresh sample; `node`, `pool` filter."""

    @extend_schema(
        parameters=[OpenApiParameter(p, str) for p in ("node", "pool")],
        responses=serializers.NoSourceSerializer(many=True),
    )
    def get(self, request):
        params = request.query_params
        pools = dict(EngineNode.objects.values_list("name", "pool__name"))
        rows = [
            {"node": node, "pool": pools.get(node) or "", **entry}
            for node, entries in coverage.uncovered_by_node(now=timezone.now(), node=params.get("node")).items()
            for entry in entries
        ]
        if params.get("pool"):
            rows = [row for row in rows if row["pool"] == params["pool"]]
        return Response(serializers.NoSourceSerializer(rows, many=True).data)


class AlertList(generics.ListAPIView):
    """Alerts, open ones by default; `state` (pending, firing, resolved, open, all), `rule`, `pool`, `node` filter."""

    serializer_class = serializers.AlertSerializer

    @extend_schema(
        parameters=[OpenApiParameter(p, str) for p in ("state", "rule", "pool", "node")],
        responses=serializers.AlertSerializer(many=True),
    )
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        params = self.request.query_params
        alerts = Alert.objects.select_related("rule", "rule_version").order_by("-started_at", "-id")
        state = params.get("state") or "open"
        if state == "open":
            alerts = alerts.exclude(state=Alert.State.RESOLVED)
        elif state in Alert.State.values:
            alerts = alerts.filter(state=state)
        elif state != "all":
            raise InvalidField("state", "must be one of pending, firing, resolved, open, all")
        if params.get("rule"):
            alerts = alerts.filter(rule__name=params["rule"])
        if params.get("pool"):
            alerts = alerts.filter(pool=params["pool"])
        if params.get("node"):
            alerts = alerts.filter(scope="node", name=params["node"])
        return alerts


class IncidentList(generics.ListAPIView):
    """Incidents (one per rule and pool while it fires); `state` firing (default), resolved or all."""

    serializer_class = serializers.IncidentSerializer

    @extend_schema(parameters=[OpenApiParameter("state", str)], responses=serializers.IncidentSerializer(many=True))
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        state = self.request.query_params.get("state") or AlertGroup.State.FIRING
        groups = AlertGroup.objects.order_by("-opened_at", "-id")
        if state in AlertGroup.State.values:
            groups = groups.filter(state=state)
        elif state != "all":
            raise InvalidField("state", "must be one of firing, resolved, all")
        return selectors.with_alerts(groups, open_only=False)


class IncidentDetail(APIView):
    """One incident with its alerts and its events (fired, escalated, acknowledged, resolved)."""

    @extend_schema(responses=serializers.IncidentDetailSerializer)
    def get(self, request, pk):
        groups = selectors.incidents_by_id([pk])
        if not groups:
            get_object_or_404(AlertGroup, pk=pk)
        group = groups[0]
        events = group.events.select_related("actor", "alert")
        body = selectors.incident_summary(group)
        body["events"] = serializers.AlertEventSerializer(events, many=True).data
        return Response(body)


class IncidentAcknowledge(APIView):
    required_action = Action.ALERT_RESPOND

    @extend_schema(
        request=serializers.AcknowledgeSerializer,
        responses={200: serializers.IncidentSerializer, 409: conflict("The incident is resolved already.")},
    )
    def post(self, request, pk):
        group = get_object_or_404(AlertGroup, pk=pk)
        data = validated(serializers.AcknowledgeSerializer, request.data)
        lifecycle.alert_group_acknowledge(actor=request.user, group=group, note=data["note"])
        return Response(selectors.incident_summary(selectors.incidents_by_id([pk])[0]))


class SilenceList(generics.ListAPIView):
    """Silences in effect (`all=1`: every silence); POST creates one."""

    serializer_class = serializers.SilenceSerializer
    required_action = Action.ALERT_RESPOND

    @extend_schema(parameters=[OpenApiParameter("all", bool, description="every silence, ended ones too")])
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        if query_flag(self.request.query_params, "all"):
            return Silence.objects.select_related("created_by", "expired_by")
        return selectors.active_silences(now=timezone.now()).select_related("expired_by")

    @extend_schema(request=serializers.SilenceCreateSerializer, responses={201: serializers.SilenceSerializer})
    def post(self, request):
        data = validated(serializers.SilenceCreateSerializer, request.data)
        silence = lifecycle.silence_create(actor=request.user, **data)
        return Response(serializers.SilenceSerializer(silence).data, status=status.HTTP_201_CREATED)


class SilenceExpire(APIView):
    required_action = Action.ALERT_RESPOND

    @extend_schema(
        request=serializers.SilenceExpireSerializer,
        responses={200: serializers.SilenceSerializer, 409: conflict("The silence is not in effect.")},
    )
    def post(self, request, pk):
        silence = get_object_or_404(Silence, pk=pk)
        data = validated(serializers.SilenceExpireSerializer, request.data)
        silence = lifecycle.silence_expire(actor=request.user, silence=silence, reason=data["reason"])
        return Response(serializers.SilenceSerializer(silence).data)
