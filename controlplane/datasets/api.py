"""REST endpoints for intent datasets (upload), models (train, progress, evaluation) and releases to pools, and for
warmup datasets (upload or derive from a log), their versions and their assignment to pools."""

from django.core.exceptions import RequestDataTooBig
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, status
from rest_framework.response import Response

from controlplane.accounts.roles import Action
from controlplane.datasets import selectors, serializers
from controlplane.datasets.conversation_logs import DEFAULT_TOP_N
from controlplane.datasets.models import IntentDataset, IntentModel, WarmupDataset, WarmupDatasetVersion
from controlplane.datasets.services.datasets import intent_dataset_create
from controlplane.datasets.services.releases import intent_model_publish, intent_model_unpublish
from controlplane.datasets.services.training import intent_model_create
from controlplane.datasets.services.warmup import pool_warmup_assign, warmup_dataset_create, warmup_version_create
from controlplane.datasets.uploads import MAX_BYTES
from controlplane.lib.body_limit import BodyTooLarge, declared_length
from controlplane.lib.errors import InvalidField, NotFound
from controlplane.lib.openapi import conflict, not_found
from controlplane.lib.parsers import PayloadTooLarge
from controlplane.lib.serializers import validated
from controlplane.nodes.models import Pool


class IntentDatasetList(generics.ListAPIView):
    queryset = IntentDataset.objects.select_related("created_by").defer("rows_json")
    serializer_class = serializers.IntentDatasetSerializer
    required_action = Action.INTENT_TRAIN

    @extend_schema(
        request=serializers.IntentDatasetCreateSerializer,
        responses={201: serializers.IntentDatasetSerializer, 409: conflict("A dataset with that name exists.")},
    )
    def post(self, request):
        data, content = upload_validated(serializers.IntentDatasetCreateSerializer, request)
        dataset = intent_dataset_create(
            actor=request.user, name=data["name"], description=data["description"], content=content, fmt=data["format"]
        )
        return Response(serializers.IntentDatasetSerializer(dataset).data, status=status.HTTP_201_CREATED)


def upload_validated(serializer_class, request) -> tuple[dict, bytes | str]:
    """The fields of an upload request and its content, from a multipart `file` or a JSON `content` string."""
    try:
        payload = request.data
    except (BodyTooLarge, RequestDataTooBig, PayloadTooLarge) as exc:
        if isinstance(exc, BodyTooLarge) and exc.field != "body":
            raise  # a multipart file over its own limit: the handler's error names the file
        raise PayloadTooLarge(
            "send a larger dataset as a multipart `file`",
            field="content",
            size=declared_length(request.META.get("CONTENT_LENGTH")),
        ) from None
    data = validated(serializer_class, payload)
    if "file" not in data:
        return data, data["content"]
    upload = data["file"]
    if upload.size > MAX_BYTES:
        raise InvalidField("file", f"{upload.size} bytes is over the limit of {MAX_BYTES} bytes (20 MiB)")
    return data, upload.read()


class IntentDatasetDetail(generics.GenericAPIView):
    serializer_class = serializers.IntentDatasetDetailSerializer

    def get(self, request, name):
        dataset = selectors.intent_dataset_get(name=name)
        dataset.preview = selectors.intent_dataset_preview(dataset=dataset)
        return Response(serializers.IntentDatasetDetailSerializer(dataset).data)


class IntentModelList(generics.ListAPIView):
    """A dataset's models, newest first; POST queues a training run and returns at once (watch `progress`)."""

    serializer_class = serializers.IntentModelSerializer
    required_action = Action.INTENT_TRAIN

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema generator has no dataset name
            return IntentModel.objects.none()
        return selectors.intent_models(dataset=selectors.intent_dataset_get(name=self.kwargs["name"]))

    @extend_schema(request=serializers.IntentModelCreateSerializer, responses={201: serializers.IntentModelSerializer})
    def post(self, request, name):
        dataset = selectors.intent_dataset_get(name=name)
        data = validated(serializers.IntentModelCreateSerializer, request.data)
        model = intent_model_create(actor=request.user, dataset=dataset, epochs=data["epochs"])
        return Response(serializers.IntentModelSerializer(model).data, status=status.HTTP_201_CREATED)


class IntentModelDetail(generics.GenericAPIView):
    serializer_class = serializers.IntentModelDetailSerializer

    def get(self, request, name, number):
        model = selectors.intent_model_get(dataset=selectors.intent_dataset_get(name=name), number=number)
        return Response(serializers.IntentModelDetailSerializer(model).data)


class IntentModelReleaseList(generics.ListAPIView):
    """Which intent model each pool's gateway was told to use, newest first; POST publishes or reverts."""

    serializer_class = serializers.IntentModelReleaseSerializer
    required_action = Action.INTENT_PUBLISH

    @extend_schema(parameters=[OpenApiParameter("pool", str)])
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        name = self.request.query_params.get("pool")
        return selectors.intent_model_releases(pool=_pool(name) if name else None)

    @extend_schema(
        request=serializers.IntentModelReleaseCreateSerializer,
        responses={
            201: serializers.IntentModelReleaseSerializer,
            404: not_found("No such pool, dataset or model."),
            409: conflict(
                "The model's training did not succeed (`model_not_publishable`), its accuracy is below the pool's "
                "floor (`accuracy_below_floor`), or the pool uses it already."
            ),
        },
    )
    def post(self, request):
        data = validated(serializers.IntentModelReleaseCreateSerializer, request.data)
        pool = _pool(data["pool"])
        if "dataset" in data:
            dataset = selectors.intent_dataset_get(name=data["dataset"])
            model = selectors.intent_model_get(dataset=dataset, number=data["number"])
            release = intent_model_publish(actor=request.user, pool=pool, intent_model=model, reason=data["reason"])
        else:
            release = intent_model_unpublish(actor=request.user, pool=pool, reason=data["reason"])
        return Response(serializers.IntentModelReleaseSerializer(release).data, status=status.HTTP_201_CREATED)


def _pool(name: str) -> Pool:
    pool = Pool.objects.filter(name=name).first()
    if pool is None:
        raise NotFound(f"pool: no pool named {name!r}")
    return pool


class WarmupDatasetList(generics.ListAPIView):
    """Warmup datasets; POST creates one with its version 1 from a message file or a conversation log."""

    queryset = WarmupDataset.objects.select_related("created_by")
    serializer_class = serializers.WarmupDatasetSerializer
    required_action = Action.WARMUP_WRITE

    @extend_schema(
        request=serializers.WarmupDatasetCreateSerializer,
        responses={
            201: serializers.WarmupDatasetDetailSerializer,
            409: conflict("A warmup dataset with that name exists."),
        },
    )
    def post(self, request):
        data, content = upload_validated(serializers.WarmupDatasetCreateSerializer, request)
        dataset = warmup_dataset_create(
            actor=request.user,
            name=data["name"],
            description=data["description"],
            comment=data["comment"],
            content=content,
            fmt=data["format"],
            source=data["source"],
            top_n=data.get("top_n", DEFAULT_TOP_N),
        )
        return Response(_warmup_dataset_detail(dataset), status=status.HTTP_201_CREATED)


class WarmupDatasetDetail(generics.GenericAPIView):
    serializer_class = serializers.WarmupDatasetDetailSerializer

    def get(self, request, name):
        return Response(_warmup_dataset_detail(selectors.warmup_dataset_get(name=name)))


def _warmup_dataset_detail(dataset: WarmupDataset) -> dict:
    dataset.version_list = selectors.warmup_versions(dataset=dataset)
    dataset.active_assignments = selectors.pool_warmups().filter(version__dataset=dataset, is_active=True)
    return serializers.WarmupDatasetDetailSerializer(dataset).data


class WarmupVersionList(generics.ListAPIView):
    """A dataset's versions, newest first; POST saves the next one from `base_version` (a stale base is a 409)."""

    serializer_class = serializers.WarmupVersionSerializer
    required_action = Action.WARMUP_WRITE

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema generator has no dataset name
            return WarmupDatasetVersion.objects.none()
        return selectors.warmup_versions(dataset=selectors.warmup_dataset_get(name=self.kwargs["name"]))

    @extend_schema(
        request=serializers.WarmupVersionCreateSerializer,
        responses={
            201: serializers.WarmupVersionSerializer,
            409: conflict("`base_version` is not the latest version any more (code `stale_base_version`)."),
        },
    )
    def post(self, request, name):
        dataset = selectors.warmup_dataset_get(name=name)
        data, content = upload_validated(serializers.WarmupVersionCreateSerializer, request)
        version = warmup_version_create(
            actor=request.user,
            dataset=dataset,
            base_number=data["base_version"],
            comment=data["comment"],
            content=content,
            fmt=data["format"],
            source=data["source"],
            top_n=data.get("top_n", DEFAULT_TOP_N),
        )
        return Response(serializers.WarmupVersionSerializer(version).data, status=status.HTTP_201_CREATED)


class WarmupVersionDetail(generics.GenericAPIView):
    """One version with its first 50 messages and per-intent counts."""

    serializer_class = serializers.WarmupVersionDetailSerializer

    def get(self, request, name, number):
        version = selectors.warmup_version_get(dataset=selectors.warmup_dataset_get(name=name), number=number)
        version.preview = selectors.warmup_preview(version=version)
        return Response(serializers.WarmupVersionDetailSerializer(version).data)


class PoolWarmupList(generics.ListAPIView):
    """Which warmup dataset version each pool replays, newest first; POST assigns one to a pool."""

    serializer_class = serializers.PoolWarmupSerializer
    required_action = Action.WARMUP_ASSIGN

    @extend_schema(parameters=[OpenApiParameter("pool", str)])
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        name = self.request.query_params.get("pool")
        return selectors.pool_warmups(pool=_pool(name) if name else None)

    @extend_schema(
        request=serializers.PoolWarmupCreateSerializer,
        responses={
            201: serializers.PoolWarmupSerializer,
            404: not_found("No such pool, warmup dataset or version."),
            409: conflict("The pool warms up with that version already."),
        },
    )
    def post(self, request):
        data = validated(serializers.PoolWarmupCreateSerializer, request.data)
        pool = _pool(data["pool"])
        dataset = selectors.warmup_dataset_get(name=data["dataset"])
        version = selectors.warmup_version_get(dataset=dataset, number=data["number"])
        assignment = pool_warmup_assign(actor=request.user, pool=pool, version=version, reason=data["reason"])
        return Response(serializers.PoolWarmupSerializer(assignment).data, status=status.HTTP_201_CREATED)
