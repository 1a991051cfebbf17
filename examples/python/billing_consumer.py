"""The design documents' billing consumer, written with idem for Python.

For each `order.confirmed.v1` event it charges the payment provider once (POST
/payments/charge, the event id as Idempotency-Key) and, in the transaction that marks the
event processed, marks the order paid and appends a ledger row. The call is made by idem's
engine, concurrently across customers and one at a time per customer (the Kafka key), in
offset order; a provider that is slow, drops answers or answers 503 is retried with the same
key, so it charges once.

    python3 examples/python/billing_consumer.py --db sqlite:///billing.db \
        --brokers 127.0.0.1:9092 --provider http://127.0.0.1:8080

The orders and billing_ledger tables are the reference system's (`idem migrate --reference`).
Stops on Ctrl-C or SIGTERM, committing the batch in progress.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import idem

TOPIC = "order-service.order.confirmed"


def make_app(db: str, brokers: str, provider: str, **settings: Any) -> idem.App:
    app = idem.App(settings={"store.url": db, "kafka.bootstrap.servers": brokers,
                             "consumer.group": "billing-order-confirmed", **settings})
    charge_url = provider.rstrip("/") + "/payments/charge"

    def charge(event: idem.Event) -> idem.Request:
        # The amount travels as the event wrote it (a string of exact digits).
        return idem.Request(charge_url, json={"order_id": event.data["order_id"],
                                              "amount": event.data["total_amount"]})

    @app.handler(TOPIC, type="order.confirmed.v1", request=charge)
    def charged(event: idem.Event, response: idem.Response, tx: idem.Tx) -> None:
        payment_id = response.json().get("payment_id")
        if not isinstance(payment_id, str):
            raise idem.DeadLetter(f"the provider answered {response.status} without a "
                                  f"payment_id: {response.text[:200]}")
        order_id = event.data["order_id"]
        tx.defer("UPDATE orders SET payment_status = 'charged' WHERE id = $1", order_id)
        tx.defer("INSERT INTO billing_ledger(order_id, event_id, amount, provider_payment_id) "
                 "VALUES ($1, $2, $3, $4)", order_id, event.id, event.data["total_amount"],
                 payment_id)

    return app


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True, help="store URL (with the reference tables)")
    parser.add_argument("--brokers", required=True, help="Kafka bootstrap servers")
    parser.add_argument("--provider", required=True, help="the payment provider's base URL")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="any key of idem consume, e.g. consumer.max_in_flight=256")
    args = parser.parse_args()
    extra = dict(kv.split("=", 1) for kv in args.set)
    app = make_app(args.db, args.brokers, args.provider, **extra)
    stats = app.run()
    print(f"stopped: {stats}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
