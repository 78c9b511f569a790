"""What the ORM stores import, gathered from the modules that hold it, one concern each.

- input cleaning and the ``Page`` type: :mod:`.rules.base` (backend-neutral, shared with the in-memory family);
- paging (offset and keyset pages): :mod:`.paging`;
- conversation access in SQL (``readable``, ``writable_conversation``): :mod:`.access`;
- compiled statements and the rows they read: :mod:`.statements`;
- the dialect of a connection (``dialect_for``) and ``execute_bound``, ``Utf8Text``: :mod:`.dialects`;
- async twins and connection healing: :mod:`.twins`.

The stores, the runtime, the API and the tests import these names from here;
each stays importable from here as long as it lives in one of those modules.
"""

from __future__ import annotations

from .access import (
    bump_counter as bump_counter,
    may_read as may_read,
    readable as readable,
    readable_conversation as readable_conversation,
    writable_conversation as writable_conversation,
)
from .paging import (
    PAGE_SNAPSHOT_ATTEMPTS as PAGE_SNAPSHOT_ATTEMPTS,
    keyset as keyset,
    keyset_page as keyset_page,
    paginate as paginate,
    past_cursor as past_cursor,
)
from .dialects import Utf8Text as Utf8Text
from .dialects import dialect_for as dialect_for
from .dialects import execute_bound as execute_bound
from .rules.base import (
    MAX_EPOCH as MAX_EPOCH,
    MAX_OFFSET as MAX_OFFSET,
    MAX_SCOPE_LENGTH as MAX_SCOPE_LENGTH,
    UNSET as UNSET,
    Page as Page,
    can_read as can_read,
    check_scope as check_scope,
    check_writable as check_writable,
    clean_datetime as clean_datetime,
    clean_epoch as clean_epoch,
    clean_json as clean_json,
    clean_object as clean_object,
    clean_order as clean_order,
    clean_paging as clean_paging,
    clean_text as clean_text,
    clean_with_total as clean_with_total,
    ids_of as ids_of,
    json_size as json_size,
    lookup_id as lookup_id,
    page_of_rows as page_of_rows,
    parse_id as parse_id,
)
from .statements import (
    Statement as Statement,
    compile_statement as compile_statement,
    decode_json_column as decode_json_column,
    instance_builder as instance_builder,
    is_plain_json_decoder as is_plain_json_decoder,
    plain_model_fields as plain_model_fields,
    read_models as read_models,
    statement_slots as statement_slots,
)
from .twins import async_twin as async_twin
from .twins import heal_connections as heal_connections
from .twins import healed as healed
