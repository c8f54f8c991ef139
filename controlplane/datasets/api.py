"""REST endpoints for intent datasets (upload), models (train, progress, evaluation) and releases to pools."""

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, status
from rest_framework.response import Response

from controlplane.accounts.roles import Action
from controlplane.datasets import selectors, serializers
from controlplane.datasets.models import IntentDataset, IntentModel
from controlplane.datasets.services.datasets import intent_dataset_create
from controlplane.datasets.services.releases import intent_model_publish, intent_model_unpublish
from controlplane.datasets.services.training import intent_model_create
from controlplane.datasets.uploads import MAX_BYTES
from controlplane.lib.errors import InvalidField, NotFound
from controlplane.lib.serializers import validated
from controlplane.nodes.models import Pool


class IntentDatasetList(generics.ListAPIView):
    queryset = IntentDataset.objects.select_related("created_by").defer("rows_json")
    serializer_class = serializers.IntentDatasetSerializer
    required_action = Action.INTENT_TRAIN

    @extend_schema(
        request=serializers.IntentDatasetCreateSerializer, responses={201: serializers.IntentDatasetSerializer}
    )
    def post(self, request):
        try:
            payload = request.data
        except RequestDataTooBig:
            limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
            raise InvalidField(
                "content", f"a JSON body is limited to {limit} bytes; send a larger dataset as a multipart file"
            ) from None
        data = validated(serializers.IntentDatasetCreateSerializer, payload)
        if "file" in data:
            upload = data["file"]
            if upload.size > MAX_BYTES:
                raise InvalidField("file", f"{upload.size} bytes is over the limit of {MAX_BYTES} bytes (20 MiB)")
            content = upload.read()
        else:
            content = data["content"]
        dataset = intent_dataset_create(
            actor=request.user, name=data["name"], description=data["description"], content=content, fmt=data["format"]
        )
        return Response(serializers.IntentDatasetSerializer(dataset).data, status=status.HTTP_201_CREATED)


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
        responses={201: serializers.IntentModelReleaseSerializer},
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
