"""`manage.py remask_review_items`: mask every stored review text again with today's masker (after an upgrade that
taught it a new form of customer data; the release that does so also runs it as a migration)."""

from django.core.management.base import BaseCommand

from controlplane.reviews.models import ReviewItem
from controlplane.reviews.remask import remask_review_items


class Command(BaseCommand):
    help = "Mask every stored review text again with today's masker; texts that become equal merge."

    def handle(self, *args, **options):
        done = remask_review_items(ReviewItem)
        self.stdout.write(
            f"{done.checked} review texts checked: {done.remasked} masked again, {done.merged} merged into an equal one"
        )
