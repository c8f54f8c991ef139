from rest_framework import serializers

from controlplane.accounts.models import User
from controlplane.accounts.roles import PERMISSIONS, Role
from controlplane.lib.serializers import StrictSerializer


class UserSerializer(serializers.ModelSerializer):
    class Meta:
        model = User
        fields = ["username", "email", "role", "is_active", "last_login", "date_joined"]


class MeSerializer(UserSerializer):
    allowed_actions = serializers.SerializerMethodField()

    class Meta(UserSerializer.Meta):
        fields = [*UserSerializer.Meta.fields, "allowed_actions"]

    def get_allowed_actions(self, user) -> list[str]:
        return sorted(action for action in PERMISSIONS if user.can(action))


class UserCreateSerializer(StrictSerializer):
    username = serializers.RegexField(r"^[\w.@+-]{1,150}$")
    password = serializers.CharField(write_only=True)
    role = serializers.ChoiceField(choices=Role.choices)
    email = serializers.EmailField(required=False, allow_blank=True, default="")


class UserUpdateSerializer(StrictSerializer):
    role = serializers.ChoiceField(choices=Role.choices, required=False)
    is_active = serializers.BooleanField(required=False)
    reason = serializers.CharField(required=False, allow_blank=True, default="")


class TokenSerializer(serializers.Serializer):
    token = serializers.CharField(help_text="Send it as `Authorization: Token <token>`; issuing one ends the last.")
    username = serializers.CharField()
    role = serializers.ChoiceField(choices=Role.choices)


class TokenRequestSerializer(StrictSerializer):
    username = serializers.CharField()
    password = serializers.CharField(write_only=True)
