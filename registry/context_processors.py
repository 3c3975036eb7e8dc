"""What every page's layout needs to know beyond the request and the user."""

from django.conf import settings


def site(request):
    return {"sign_in_with_hub": settings.SIGN_IN_WITH_HUB}
