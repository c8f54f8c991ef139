"""REST endpoints for conversation logs: upload or import, list, detail, analyses and applying their suggestions."""

from drf_spectacular.utils import extend_schema
from rest_framework import generics, status
from rest_framework.parsers import JSONParser, MultiPartParser
from rest_framework.response import Response

from controlplane.accounts.roles import Action
from controlplane.convlogs import selectors, serializers
from controlplane.convlogs.models import LogAnalysis
from controlplane.convlogs.services.analyses import log_analysis_apply, log_analysis_create
from controlplane.convlogs.services.logs import conversation_log_create, conversation_log_import
from controlplane.lib.errors import NotFound
from controlplane.lib.openapi import conflict, not_found
from controlplane.lib.serializers import validated
from controlplane.nodes.models import Pool


class ConversationLogList(generics.ListAPIView):
    """Conversation logs, newest first; POST uploads one (multipart, streamed to disk; up to
    CONVERSATION_LOG_MAX_BYTES, 413 beyond)."""

    queryset = selectors.conversation_logs()
    serializer_class = serializers.ConversationLogSerializer
    parser_classes = [MultiPartParser]
    required_action = Action.CONVLOG_WRITE

    @extend_schema(
        request={"multipart/form-data": serializers.ConversationLogUploadSerializer},
        responses={201: serializers.ConversationLogSerializer, 409: conflict("A log with that name exists.")},
    )
    def post(self, request):
        data = validated(serializers.ConversationLogUploadSerializer, request.data)
        upload = data["file"]
        log = conversation_log_create(
            actor=request.user,
            name=data["name"],
            description=data["description"],
            filename=upload.name,
            chunks=upload.chunks(),
        )
        return Response(serializers.ConversationLogSerializer(log).data, status=status.HTTP_201_CREATED)


class ConversationLogImport(generics.GenericAPIView):
    """Register a file already on the control-plane host, from under CONVERSATION_LOG_IMPORT_DIR only (copied in)."""

    serializer_class = serializers.ConversationLogSerializer
    parser_classes = [JSONParser]
    required_action = Action.CONVLOG_IMPORT

    @extend_schema(
        request=serializers.ConversationLogImportSerializer,
        responses={201: serializers.ConversationLogSerializer, 409: conflict("A log with that name exists.")},
    )
    def post(self, request):
        data = validated(serializers.ConversationLogImportSerializer, request.data)
        log = conversation_log_import(
            actor=request.user, name=data["name"], description=data["description"], path=data["path"]
        )
        return Response(serializers.ConversationLogSerializer(log).data, status=status.HTTP_201_CREATED)


class ConversationLogDetail(generics.GenericAPIView):
    serializer_class = serializers.ConversationLogDetailSerializer

    def get(self, request, name):
        log = selectors.conversation_log_get(name=name)
        log.analysis_list = selectors.log_analyses(log=log)
        return Response(serializers.ConversationLogDetailSerializer(log).data)


class LogAnalysisList(generics.ListAPIView):
    """A log's analyses, newest first; POST queues one against a pool's active version and returns at once."""

    serializer_class = serializers.LogAnalysisSerializer
    required_action = Action.CONVLOG_WRITE

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema generator has no log name
            return LogAnalysis.objects.none()
        return selectors.log_analyses(log=selectors.conversation_log_get(name=self.kwargs["name"]))

    @extend_schema(
        request=serializers.LogAnalysisCreateSerializer,
        responses={201: serializers.LogAnalysisSerializer, 404: not_found("No such pool.")},
    )
    def post(self, request, name):
        log = selectors.conversation_log_get(name=name)
        data = validated(serializers.LogAnalysisCreateSerializer, request.data)
        pool = Pool.objects.select_related("desired_version__template").filter(name=data["pool"]).first()
        if pool is None:
            raise NotFound(f"pool: no pool named {data['pool']!r}")
        analysis = log_analysis_create(actor=request.user, log=log, pool=pool, coverage=data["coverage"])
        return Response(serializers.LogAnalysisSerializer(analysis).data, status=status.HTTP_201_CREATED)


class LogAnalysisDetail(generics.GenericAPIView):
    serializer_class = serializers.LogAnalysisDetailSerializer

    def get(self, request, name, pk):
        analysis = selectors.log_analysis_get(log=selectors.conversation_log_get(name=name), pk=pk)
        return Response(serializers.LogAnalysisDetailSerializer(analysis).data)


class LogAnalysisApply(generics.GenericAPIView):
    """Save an analysis' suggestions as the next version of the analysed template; nothing is published."""

    serializer_class = serializers.AppliedVersionSerializer
    required_action = Action.TEMPLATE_WRITE

    @extend_schema(
        request=serializers.SuggestionApplySerializer,
        responses={
            201: serializers.AppliedVersionSerializer,
            409: conflict("The analysis has not succeeded, or `base_version` is stale."),
        },
    )
    def post(self, request, name, pk):
        analysis = selectors.log_analysis_get(log=selectors.conversation_log_get(name=name), pk=pk)
        data = validated(serializers.SuggestionApplySerializer, request.data)
        version = log_analysis_apply(
            actor=request.user,
            analysis=analysis,
            kinds=data.get("suggestions"),
            base_number=data.get("base_version"),
            comment=data["comment"],
        )
        return Response(applied_version(version), status=status.HTTP_201_CREATED)


def applied_version(version) -> dict:
    return {
        "template": version.template.name,
        "number": version.number,
        "ref": version.ref,
        "comment": version.comment,
        "is_published": Pool.objects.filter(desired_version=version).exists(),
    }
