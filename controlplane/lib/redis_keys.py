"""Names of the control plane's own Redis keys: prefixed with the channel layer's prefix, as its groups are, so that
several control planes (or test runs) on one Redis keep apart."""

from django.conf import settings


def control_plane_key(name: str) -> str:
    return f"{settings.CHANNEL_LAYERS['default'].get('CONFIG', {}).get('prefix', 'cp')}:{name}"
