"""Signed webhooks: a tenant's endpoints receive its plans' events, at least once.

    endpoints.py   registering, listing, rotating and deleting endpoints, and reading their
                   deliveries (the control plane's side, what the API, the CLI and the client call)
    signing.py     each endpoint's secret, derived from the operator's key, and the signature
    schedule.py    when a delivery that failed is tried again, and when it is given up
    request.py     what a delivery sends: its body and its headers
    sending.py     one POST, only where the operator's allowlist and the address rules allow
    courier.py     every worker's deliverer: takes what is due, sends it, records what came of it

The outbox itself is :mod:`storage.webhook_outbox` (a delivery row is written by the transaction
that stores its event); DESIGN.md, "Webhooks", has the order of writes.
"""
