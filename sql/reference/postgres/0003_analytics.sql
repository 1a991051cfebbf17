-- The analytics consumer of the reference system (group analytics-order-confirmed):
-- revenue and order count per customer, from order.confirmed.v1. Its dedup rows are
-- its own processed_event rows (per consumer group), so billing and analytics each
-- apply every event once. The SQLite schema uses the same names and columns.
--
-- Revenue is kept in hundredths (an exact integer) so that one upsert statement,
-- `revenue_hundredths = revenue_hundredths + excluded.revenue_hundredths`, is exact
-- on both backends (SQLite has no exact decimal arithmetic).
--
-- order_count counts applied events: if dedup ever failed, it would exceed the number
-- of confirmed orders of the customer, which the reference-system tests compare.
CREATE TABLE analytics_customer_revenue (
  customer_id        bigint      PRIMARY KEY,
  revenue_hundredths bigint      NOT NULL CHECK (revenue_hundredths >= 0),
  order_count        bigint      NOT NULL CHECK (order_count >= 0),
  updated_at         timestamptz NOT NULL DEFAULT now()
);
