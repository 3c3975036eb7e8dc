from rest_framework.pagination import PageNumberPagination


class Pagination(PageNumberPagination):
    """{"count", "next", "previous", "results"}; clients may ask for up to 200 per page."""

    page_size_query_param = "page_size"
    max_page_size = 200
