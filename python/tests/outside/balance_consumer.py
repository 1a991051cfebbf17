#!/usr/bin/env python3
"""A consumer app as a user writes one: an idem.App whose handler keeps account balances.

    balance_consumer.py --store URL --bootstrap HOST:PORT --topic T --group G --lane L
                        [--mode sync|async] [--raising] [--runs-log FILE]

Its tables are accounts_L and movements_L (apps of several lanes may share a store). Per
deposit.v1 event the handler reads the account's balance, computes the new one in
Python and writes it back (a read-modify-write, so an effect applied twice or lost shows in
the balance), and inserts one movement row. With --raising it does all of that and then
raises for the accounts named `bad-*` (idem.DeadLetter) and `err-*` (ValueError), so the
effects of those events exist in the transaction until idem rolls them back. With
--runs-log each call appends its event id to FILE, outside the transaction, so the calls
whose batch did not commit can be seen.

It runs until SIGTERM, then prints the App's stats as one JSON line and exits 0. The tests
in test_handlers_outside.py SIGKILL it at moments of their choosing and start it again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

import idem


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--lane", required=True)
    parser.add_argument("--mode", choices=["sync", "async"], default="sync")
    parser.add_argument("--raising", action="store_true")
    parser.add_argument("--batch-size", type=int, default=50)
    parser.add_argument("--runs-log", help="a file that gets each handler call's event id")
    args = parser.parse_args()

    app = idem.App(settings={
        "store.url": args.store,
        "kafka.bootstrap.servers": args.bootstrap,
        "consumer.group": args.group,
        "consumer.batch_size": args.batch_size,
        "kafka.auto.offset.reset": "earliest",
        # The dev broker (librdkafka's mock cluster) gives a SIGKILLed member's partitions
        # to the restarted process only after the dead member's session timeout: as short
        # as the mock allows, as the C++ fault tests' consumers (tests/support/mock_group.hpp).
        "kafka.session.timeout.ms": "4000",
        "kafka.heartbeat.interval.ms": "1000",
        "kafka.log_level": "3",
    })

    accounts, movements = f"accounts_{args.lane}", f"movements_{args.lane}"
    select = f"SELECT balance FROM {accounts} WHERE id = $1"
    update = f"UPDATE {accounts} SET balance = $1 WHERE id = $2"
    insert = f"INSERT INTO {movements} (event_id, account, amount) VALUES ($1, $2, $3)"

    def log_run(event: idem.Event) -> None:
        # An effect outside the transaction, as a user's log line: it shows the calls whose
        # batch did not commit (killed, or run again with savepoints).
        if args.runs_log:
            with open(args.runs_log, "a") as runs:
                runs.write(f"{event.id}\n")

    def refuse(account: str) -> None:
        if not args.raising:
            return
        if account.startswith("bad-"):
            raise idem.DeadLetter(f"account {account} is closed")
        if account.startswith("err-"):
            raise ValueError(f"no branch keeps {account}")

    if args.mode == "sync":
        @app.handler(args.topic, type="deposit.v1")
        def on_deposit(event: idem.Event, tx: idem.Tx) -> None:
            account, amount = event.data["account"], event.data["amount"]
            balance = tx.execute(select, account).one().balance
            tx.execute(update, balance + amount, account)
            tx.defer(insert, str(event.id), account, amount)
            log_run(event)
            refuse(account)
    else:
        @app.handler(args.topic, type="deposit.v1")
        async def on_deposit_async(event: idem.Event, tx: idem.Tx) -> None:
            account, amount = event.data["account"], event.data["amount"]
            balance = (await tx.execute(select, account)).one().balance
            await asyncio.sleep(0)  # the handler gives way to the loop between statements
            await tx.execute(update, balance + amount, account)
            tx.defer(insert, str(event.id), account, amount)
            log_run(event)
            refuse(account)

    stats = app.run()
    counts = stats if isinstance(stats, dict) else {name: getattr(stats, name) for name in (
        "delivered", "processed", "duplicates", "dead_lettered", "retries", "transactions")}
    print(json.dumps(counts, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
