"""REST endpoints for the signed-in user, user management (admin) and API tokens."""

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import generics, status
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.accounts import serializers, services
from controlplane.accounts.models import User
from controlplane.accounts.roles import Action
from controlplane.lib.openapi import conflict, error
from controlplane.lib.serializers import validated


class Me(APIView):
    @extend_schema(responses=serializers.MeSerializer)
    def get(self, request):
        return Response(serializers.MeSerializer(request.user).data)


class UserList(generics.ListAPIView):
    queryset = User.objects.order_by("username")
    serializer_class = serializers.UserSerializer
    required_action = {"GET": Action.USER_MANAGE, "POST": Action.USER_MANAGE}
    filterset_fields = ["role", "is_active"]

    @extend_schema(
        request=serializers.UserCreateSerializer,
        responses={201: serializers.UserSerializer, 409: conflict("The username is taken.")},
    )
    def post(self, request):
        data = validated(serializers.UserCreateSerializer, request.data)
        user = services.user_create(actor=request.user, **data)
        return Response(serializers.UserSerializer(user).data, status=status.HTTP_201_CREATED)


class UserDetail(APIView):
    required_action = {"GET": Action.USER_MANAGE, "PATCH": Action.USER_MANAGE}

    @extend_schema(responses=serializers.UserSerializer)
    def get(self, request, username):
        return Response(serializers.UserSerializer(get_object_or_404(User, username=username)).data)

    @extend_schema(request=serializers.UserUpdateSerializer, responses=serializers.UserSerializer)
    def patch(self, request, username):
        user = get_object_or_404(User, username=username)
        data = validated(serializers.UserUpdateSerializer, request.data)
        user = services.user_update(actor=request.user, user=user, **data)
        return Response(serializers.UserSerializer(user).data)


class TokenIssue(APIView):
    """POST username and password, get a token for `Authorization: Token <key>`."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(
        request=serializers.TokenRequestSerializer,
        responses={
            201: serializers.TokenSerializer,
            401: error("Wrong username or password, or an inactive user (code `bad_credentials`)."),
        },
    )
    def post(self, request):
        data = validated(serializers.TokenRequestSerializer, request.data)
        token = services.user_token_issue(**data)
        return Response({"token": token.key, "username": token.user.username, "role": token.user.role}, status=201)
