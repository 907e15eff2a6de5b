# flake8: noqa

# import apis into api package
from streaming_hub_api.api.admin_api import AdminApi
from streaming_hub_api.api.events_api import EventsApi
from streaming_hub_api.api.ledger_api import LedgerApi
from streaming_hub_api.api.operations_api import OperationsApi
from streaming_hub_api.api.pull_api import PullApi
from streaming_hub_api.api.subscriptions_api import SubscriptionsApi

