"""REST endpoints of the review queue: list messages, label one, undo a label, build a dataset from the labels."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, status
from rest_framework.response import Response

from controlplane.accounts.roles import Action
from controlplane.datasets.selectors import intent_dataset_get
from controlplane.datasets.serializers import IntentDatasetSerializer
from controlplane.lib.openapi import conflict, not_found
from controlplane.lib.serializers import validated
from controlplane.reviews import selectors, serializers
from controlplane.reviews.models import ReviewItem
from controlplane.reviews.services import review_dataset_create, review_item_label, review_item_undo


class ReviewItemList(generics.ListAPIView):
    """Messages the nodes sampled, masked: `status=pending` (default, oldest first) or `labelled` (latest first)."""

    serializer_class = serializers.ReviewItemSerializer

    @extend_schema(
        parameters=[
            OpenApiParameter("status", str, enum=ReviewItem.Status.values),
            OpenApiParameter("pool", str),
        ]
    )
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        params = self.request.query_params
        return selectors.review_items(status=params.get("status", ReviewItem.Status.PENDING), pool=params.get("pool"))


class ReviewItemLabel(generics.GenericAPIView):
    """Label a pending message with an intent (audited); a labelled one answers 409 until it is undone."""

    serializer_class = serializers.ReviewItemSerializer
    required_action = Action.INTENT_TRAIN

    @extend_schema(
        request=serializers.ReviewLabelSerializer,
        responses={200: serializers.ReviewItemSerializer, 409: conflict("Already labelled.")},
    )
    def post(self, request, pk):
        data = validated(serializers.ReviewLabelSerializer, request.data)
        item = review_item_label(actor=request.user, item=selectors.review_item_get(pk=pk), label=data["label"])
        return Response(serializers.ReviewItemSerializer(item).data)


class ReviewItemUndo(generics.GenericAPIView):
    """Put a labelled message back in the queue (audited)."""

    serializer_class = serializers.ReviewItemSerializer
    required_action = Action.INTENT_TRAIN

    @extend_schema(
        request=None,
        responses={200: serializers.ReviewItemSerializer, 409: conflict("Not labelled.")},
    )
    def post(self, request, pk):
        item = review_item_undo(actor=request.user, item=selectors.review_item_get(pk=pk))
        return Response(serializers.ReviewItemSerializer(item).data)


class ReviewDatasetCreate(generics.GenericAPIView):
    """A new intent dataset: a base dataset's rows plus every labelled message; train it as any dataset."""

    serializer_class = IntentDatasetSerializer
    required_action = Action.INTENT_TRAIN

    @extend_schema(
        request=serializers.ReviewDatasetCreateSerializer,
        responses={
            201: IntentDatasetSerializer,
            404: not_found("No base dataset of that name."),
            409: conflict("A dataset with that name exists."),
        },
    )
    def post(self, request):
        data = validated(serializers.ReviewDatasetCreateSerializer, request.data)
        dataset = review_dataset_create(
            actor=request.user, base=intent_dataset_get(name=data["base"]), name=data["name"]
        )
        return Response(IntentDatasetSerializer(dataset).data, status=status.HTTP_201_CREATED)
