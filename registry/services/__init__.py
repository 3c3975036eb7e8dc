"""Writes. `index` keeps the index in step with the Hub and local sources; `validation` runs conformance checks;
`webhooks` records the Hub's webhook deliveries and acts on them."""

from registry.services.index import (  # noqa: F401
    ERROR,
    NEW,
    SKIPPED,
    UNCHANGED,
    UPDATED,
    WITHDRAWN,
    SyncSummary,
    environment_get_or_create,
    environment_rename,
    environment_withdraw,
    hub_sync,
    index_problem_record,
    local_package_digest,
    local_index_by_id,
    local_package_index,
    local_sync,
    revision_record,
    space_index,
    space_index_by_id,
)
