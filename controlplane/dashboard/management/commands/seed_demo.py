"""Seed demo data: the seed's template as version 1 on both pools, the `legal` whitelist, one user per role, the
intent dataset and the `faq-warmup` warmup dataset of both pools."""

from pathlib import Path

from django.core.management.base import BaseCommand
from django.db import transaction

from controlplane.accounts.models import User
from controlplane.accounts.roles import Role
from controlplane.accounts.services import user_create
from controlplane.alerts.defaults import install_default_rules
from controlplane.alerts.models import AlertRule, AlertRuleVersion
from controlplane.datasets.models import IntentDataset, WarmupDataset, WarmupDatasetVersion
from controlplane.datasets.services.datasets import intent_dataset_create
from controlplane.datasets.services.warmup import pool_warmup_assign, warmup_dataset_create
from controlplane.nodes.models import Pool
from controlplane.nodes.services.pools import pool_create, pool_publish
from controlplane.params.models import ParameterTemplate, TemplateVersion, Whitelist
from controlplane.params.services.templates import template_create, template_import
from controlplane.params.services.whitelists import whitelist_create
from engine_node.policy.dataset import DATASET_PATH as INTENTS_JSONL

SEED_YAML = Path(__file__).resolve().parents[3] / "params" / "fixtures" / "seed_inference_params.yaml"
FESTIVAL_LOG = Path(__file__).resolve().parents[3] / "datasets" / "fixtures" / "festival_conversations.jsonl"
DEMO_PASSWORD_SUFFIX = "-demo-pass"


class Command(BaseCommand):
    help = "Create demo users, the seed template, the legal whitelist and the staging/prod-main pools (idempotent)."

    def handle(self, *args, **options):
        with transaction.atomic():
            admin = self._users()
            if not Whitelist.objects.filter(name="legal").exists():
                whitelist_create(
                    actor=admin,
                    name="legal",
                    description="Legal terms and policy questions keep the client's max_tokens.",
                    scenarios=["legal", "legal_policy"],
                    comment="seed: whitelist for legal clause queries",
                )
            if not ParameterTemplate.objects.filter(name="chat-default").exists():
                template = template_create(
                    actor=admin, name="chat-default", description="Customer-service chatbot (sales festival)"
                )
                template_import(
                    actor=admin,
                    template=template,
                    text=SEED_YAML.read_text(encoding="utf-8"),
                    fmt="yaml",
                    base_number=None,
                    comment="seed: operations manual template",
                )
            for name, is_production, description in [
                ("staging", False, "Pre-production pool; every version runs here first."),
                ("prod-main", True, "Production chatbot traffic."),
            ]:
                if not Pool.objects.filter(name=name).exists():
                    pool_create(actor=admin, name=name, is_production=is_production, description=description)
            # The seed's template runs on both pools. No node has run it on staging yet when the seed publishes it
            # to production, so that publish is an override, on the record: the manual's baseline is what
            # production ran before this control plane existed.
            version = TemplateVersion.objects.get(template__name="chat-default", number=1)
            for name in ("staging", "prod-main"):
                pool = Pool.objects.get(name=name)
                if pool.desired_version_id is None:
                    pool_publish(
                        actor=admin,
                        pool=pool,
                        version=version,
                        reason="seed: baseline from the manual",
                        override_reason="seed: the manual's baseline ran in production before this control plane"
                        if pool.is_production
                        else "",
                    )
            if not IntentDataset.objects.filter(name="shop-intents").exists():
                intent_dataset_create(
                    actor=admin,
                    name="shop-intents",
                    description="The labelled messages the built-in intent model was trained on.",
                    content=INTENTS_JSONL.read_bytes(),
                    fmt="jsonl",
                )
            self._warmup(admin)
            # The migration installs the default alert rules; a flushed database (tests) gets them here.
            install_default_rules(AlertRule, AlertRuleVersion)
        self.stdout.write("Demo logins (user / password):")
        for role in Role.values:
            self.stdout.write(f"  {role:<7} {role} / {role}{DEMO_PASSWORD_SUFFIX}")

    def _warmup(self, admin: User) -> None:
        """`faq-warmup`: the top queries of a sales-festival conversation log, the warmup of both pools."""
        if not WarmupDataset.objects.filter(name="faq-warmup").exists():
            warmup_dataset_create(
                actor=admin,
                name="faq-warmup",
                description="The most frequent customer questions of the Singles' Day sale.",
                content=FESTIVAL_LOG.read_bytes(),
                fmt="jsonl",
                source=WarmupDatasetVersion.Source.CONVERSATION_LOG,
                top_n=100,
                comment="seed: top 100 queries of 300 festival conversations",
            )
        version = WarmupDatasetVersion.objects.get(dataset__name="faq-warmup", number=1)
        for name in ("staging", "prod-main"):
            pool = Pool.objects.get(name=name)
            if not pool.warmups.exists():
                pool_warmup_assign(actor=admin, pool=pool, version=version, reason="seed: warm up on festival FAQs")

    def _users(self) -> User:
        admin = User.objects.filter(username=Role.ADMIN).first()
        if admin is None:
            # Nobody exists yet to create the first admin, so its audit entry names the actor "system".
            admin = user_create(
                actor=None, username=Role.ADMIN, password=Role.ADMIN + DEMO_PASSWORD_SUFFIX, role=Role.ADMIN
            )
            User.objects.filter(pk=admin.pk).update(is_staff=True)
        for role in Role.values:
            if not User.objects.filter(username=role).exists():
                user_create(actor=admin, username=role, password=role + DEMO_PASSWORD_SUFFIX, role=role)
        return admin
