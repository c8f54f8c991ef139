"""REST endpoints for templates, versions, import/export, diff, validation and whitelists."""

from dataclasses import asdict

from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, status
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.accounts.roles import Action
from controlplane.lib.errors import InvalidField
from controlplane.lib.openapi import conflict
from controlplane.lib.parsers import JSONParser
from controlplane.lib.serializers import optional_int, validated
from controlplane.nodes.models import Pool
from controlplane.params import codec, schema, selectors, serializers
from controlplane.params.exceptions import DocumentInvalid
from controlplane.params.explain import version_explain
from controlplane.params.models import ParameterTemplate, TemplateVersion, Whitelist, WhitelistVersion
from controlplane.params.services import templates as template_services
from controlplane.params.services import whitelists as whitelist_services

STALE_BASE = conflict("`base_version` is not the latest version any more (code `stale_base_version`): reload, redo.")


class FieldSpecList(APIView):
    """Every field of a template, its default, range and hot/cold tag."""

    @extend_schema(responses=serializers.FieldSpecSerializer(many=True))
    def get(self, request):
        rows = [{**asdict(f), "choices": list(f.choices)} for f in schema.FIELDS]
        return Response(serializers.FieldSpecSerializer(rows, many=True).data)


class TemplateList(generics.ListAPIView):
    queryset = ParameterTemplate.objects.all()
    serializer_class = serializers.TemplateSerializer
    required_action = Action.TEMPLATE_WRITE
    filterset_fields = ["name"]

    @extend_schema(
        request=serializers.TemplateCreateSerializer,
        responses={201: serializers.TemplateSerializer, 409: conflict("A template with that name exists.")},
    )
    def post(self, request):
        data = validated(serializers.TemplateCreateSerializer, request.data)
        template = template_services.template_create(actor=request.user, **data)
        return Response(serializers.TemplateSerializer(template).data, status=status.HTTP_201_CREATED)


class TemplateDetail(generics.RetrieveAPIView):
    queryset = ParameterTemplate.objects.all()
    serializer_class = serializers.TemplateSerializer
    lookup_field = "name"


class TemplateVersionList(generics.ListAPIView):
    serializer_class = serializers.VersionSerializer
    required_action = Action.TEMPLATE_WRITE

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema generator has no template name
            return TemplateVersion.objects.none()
        template = selectors.template_get(name=self.kwargs["name"])
        return template.versions.select_related("template", "author")

    @extend_schema(
        request=serializers.VersionCreateSerializer,
        responses={201: serializers.VersionDetailSerializer, 409: STALE_BASE},
    )
    def post(self, request, name):
        template = selectors.template_get(name=name)
        data = validated(serializers.VersionCreateSerializer, request.data)
        if "text" in data:
            version = template_services.template_import(
                actor=request.user,
                template=template,
                text=data["text"],
                fmt=data["format"],
                base_number=data["base_version"],
                comment=data["comment"],
            )
        else:
            version = template_services.template_version_create(
                actor=request.user,
                template=template,
                document=data["document"],
                base_number=data["base_version"],
                comment=data["comment"],
            )
        return Response(serializers.VersionDetailSerializer(version).data, status=status.HTTP_201_CREATED)


class TemplateImport(APIView):
    """Upload a YAML or JSON file (multipart `file`) as the next version."""

    parser_classes = [MultiPartParser, FormParser, JSONParser]
    required_action = Action.TEMPLATE_WRITE

    @extend_schema(
        request={
            "multipart/form-data": {
                "type": "object",
                "properties": {
                    "file": {"type": "string", "format": "binary"},
                    "format": {"type": "string", "enum": list(codec.FORMATS)},
                    "base_version": {"type": "integer"},
                    "comment": {"type": "string"},
                },
            }
        },
        responses={201: serializers.VersionDetailSerializer, 409: STALE_BASE},
    )
    def post(self, request, name):
        template = selectors.template_get(name=name)
        upload = request.FILES.get("file")
        if upload is None:
            raise InvalidField("file", "required: a YAML or JSON document")
        fmt = request.data.get("format") or ("json" if upload.name.lower().endswith(".json") else "yaml")
        base = optional_int("base_version", request.data.get("base_version"))
        raw = upload.read(template_services.max_document_bytes() + 1)
        version = template_services.template_import(
            actor=request.user,
            template=template,
            text=raw,
            fmt=fmt,
            base_number=base,
            comment=request.data.get("comment", ""),
        )
        return Response(serializers.VersionDetailSerializer(version).data, status=status.HTTP_201_CREATED)


class TemplateVersionDetail(APIView):
    @extend_schema(responses=serializers.VersionDetailSerializer)
    def get(self, request, name, number):
        version = selectors.template_version_get(template=selectors.template_get(name=name), number=number)
        return Response(serializers.VersionDetailSerializer(version).data)


class TemplateVersionExplain(APIView):
    """What a gateway would decide for a message under this version: intent, regex hits, tier, max_tokens, queue."""

    required_action = Action.VIEW

    @extend_schema(request=serializers.ExplainSerializer, responses=serializers.ExplainResultSerializer)
    def post(self, request, name, number):
        version = selectors.template_version_get(template=selectors.template_get(name=name), number=number)
        data = validated(serializers.ExplainSerializer, request.data)
        pool = None
        if data.get("pool"):
            pool = Pool.objects.filter(name=data["pool"]).first()
            if pool is None:
                raise InvalidField("pool", f"no pool named {data['pool']!r}")
        body = {key: data[key] for key in ("message", "business_tag", "conversation_id", "max_tokens") if key in data}
        granted = data.get("granted_tags", [])
        return Response(version_explain(version=version, body=body, pool=pool, granted_tags=granted))


class TemplateVersionExport(APIView):
    """The version as a YAML or JSON file, ready to import elsewhere."""

    @extend_schema(
        parameters=[OpenApiParameter("format", enum=list(codec.FORMATS), default="yaml")],
        # The same document either way: `{inference_params: {...}}`.
        responses={(200, "application/yaml"): OpenApiTypes.OBJECT, (200, "application/json"): OpenApiTypes.OBJECT},
    )
    def get(self, request, name, number):
        version = selectors.template_version_get(template=selectors.template_get(name=name), number=number)
        fmt = request.query_params.get("format", "yaml")
        text = template_services.template_version_export(version=version, fmt=fmt)
        content_type = "application/json" if fmt == "json" else "application/yaml"
        response = HttpResponse(text.encode("utf-8"), content_type=f"{content_type}; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{name}-v{version.number}.{fmt}"'
        return response


class TemplateDiff(APIView):
    """Field-by-field changes between two versions: path, old, new, hot/cold."""

    @extend_schema(
        parameters=[OpenApiParameter("from", int, required=True), OpenApiParameter("to", int, required=True)],
        responses=serializers.DiffSerializer,
    )
    def get(self, request, name):
        template = selectors.template_get(name=name)
        changes = selectors.template_versions_diff(
            template=template, old_number=request.query_params.get("from"), new_number=request.query_params.get("to")
        )
        return Response({"changes": [c.as_dict() for c in changes]})


class DocumentValidate(APIView):
    """Check a document without storing anything; the editor calls it as you type."""

    required_action = Action.VIEW

    @extend_schema(request=serializers.ValidateSerializer, responses=serializers.ValidationResultSerializer)
    def post(self, request):
        data = validated(serializers.ValidateSerializer, request.data)
        try:
            document = data["document"] if "document" in data else codec.parse(data["text"], data["format"])
            template_services.document_validate(document=document)
        except DocumentInvalid as exc:
            return Response({"valid": False, "errors": [e.as_dict() for e in exc.errors]})
        return Response({"valid": True, "errors": []})


class WhitelistList(generics.ListAPIView):
    queryset = Whitelist.objects.all()
    serializer_class = serializers.WhitelistSerializer
    required_action = Action.WHITELIST_WRITE

    @extend_schema(
        request=serializers.WhitelistCreateSerializer,
        responses={201: serializers.WhitelistSerializer, 409: conflict("A whitelist with that name exists.")},
    )
    def post(self, request):
        data = validated(serializers.WhitelistCreateSerializer, request.data)
        whitelist = whitelist_services.whitelist_create(actor=request.user, **data)
        return Response(serializers.WhitelistSerializer(whitelist).data, status=status.HTTP_201_CREATED)


class WhitelistDetail(generics.RetrieveAPIView):
    queryset = Whitelist.objects.all()
    serializer_class = serializers.WhitelistSerializer
    lookup_field = "name"


class WhitelistVersionList(generics.ListAPIView):
    serializer_class = serializers.WhitelistVersionSerializer
    required_action = Action.WHITELIST_WRITE

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema generator has no whitelist name
            return WhitelistVersion.objects.none()
        return get_object_or_404(Whitelist, name=self.kwargs["name"]).versions.select_related("author")

    @extend_schema(
        request=serializers.WhitelistVersionCreateSerializer,
        responses={201: serializers.WhitelistVersionSerializer, 409: STALE_BASE},
    )
    def post(self, request, name):
        whitelist = get_object_or_404(Whitelist, name=name)
        data = validated(serializers.WhitelistVersionCreateSerializer, request.data)
        version = whitelist_services.whitelist_version_create(
            actor=request.user,
            whitelist=whitelist,
            scenarios=data["scenarios"],
            base_number=data["base_version"],
            comment=data["comment"],
        )
        return Response(serializers.WhitelistVersionSerializer(version).data, status=status.HTTP_201_CREATED)
