#include "console/console_api.hpp"

#include <charconv>

#include <fmt/format.h>

#include "console/dedup_stats.hpp"
#include "console/replay_audit.hpp"
#include "idem/dlq.hpp"
#include "idem/error.hpp"
#include "idem/outbox.hpp"
#include "idem/retention.hpp"

namespace idem::console {

namespace {

using nlohmann::json;
using std::chrono::milliseconds;

constexpr std::size_t kMaxPayloadShown = std::size_t{64} * 1024;  // a letter's payload on the page
constexpr std::size_t kMaxMessageListed = 300;                    // an error message in the list
constexpr std::size_t kMaxSearch = 200;

std::int64_t unix_ms(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<milliseconds>(t.time_since_epoch()).count();
}
template <class D>
std::int64_t unix_ms(std::chrono::sys_time<D> t) {
  return std::chrono::duration_cast<milliseconds>(t.time_since_epoch()).count();
}

json optional_ms(const std::optional<milliseconds>& d) {
  return d ? json(d->count()) : json(nullptr);
}

std::optional<std::string> param(const Params& p, const std::string& name) {
  const auto it = p.find(name);
  if (it == p.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

template <class T>
std::optional<T> number_param(const Params& p, const std::string& name, T min, T max) {
  const auto text = param(p, name);
  if (!text) return std::nullopt;
  T value{};
  const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (ec != std::errc() || end != text->data() + text->size() || value < min || value > max) {
    throw ApiError(400, fmt::format("{} must be a whole number from {} to {}", name, min, max));
  }
  return value;
}

std::string dlq_topic_param(const ApiContext& ctx, const Params& p) {
  const auto topic = param(p, "topic");
  if (!topic || !valid_topic_name(*topic) || !topic->ends_with(ctx.options.dlq_suffix)) {
    throw ApiError(400, fmt::format("topic must be a dead-letter topic (a Kafka topic name "
                                    "ending with '{}')",
                                    ctx.options.dlq_suffix));
  }
  return *topic;
}

// A Kafka error about the topic itself is the caller's (404), the rest the broker's (502).
std::vector<DeadLetterRecord> read_letters(const ApiContext& ctx, const std::string& topic,
                                           const DlqFilter& filter) {
  try {
    return read_dead_letters(ctx.options.kafka, topic, filter);
  } catch (const Error& e) {
    throw ApiError(e.code() == ErrorCode::InvalidArgument ? 404 : 502, e.what());
  }
}

json summary(const DeadLetterRecord& r, std::chrono::system_clock::time_point now) {
  std::string message = r.error_message;
  if (message.size() > kMaxMessageListed) message.resize(kMaxMessageListed);
  json original = {{"topic", r.original_topic},
                   {"partition", r.original_partition ? json(*r.original_partition) : json()},
                   {"offset", r.original_offset ? json(*r.original_offset) : json()}};
  return {{"partition", r.partition},
          {"offset", r.offset},
          {"dead_lettered_at_ms", r.dead_lettered_at ? json(unix_ms(*r.dead_lettered_at)) : json()},
          {"reason", r.error_class},
          {"message", message},
          {"group", r.consumer_group},
          {"key", r.key},
          {"event_id", r.event_id ? json(r.event_id->to_string()) : json()},
          {"event_age_ms", optional_ms(r.event_age(now))},
          {"original", std::move(original)},
          {"attempts", r.attempts ? json(*r.attempts) : json()},
          {"copies", r.copies},
          {"payload_bytes", r.payload.size()}};
}

bool contains_ignoring_case(std::string_view text, std::string_view needle) {
  const auto lower = [](char c) {
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
  };
  return std::search(text.begin(), text.end(), needle.begin(), needle.end(),
                     [&](char a, char b) { return lower(a) == lower(b); }) != text.end();
}

template <class F>
json section(F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    return {{"error", e.what()}};
  }
}

}  // namespace

bool valid_topic_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > 249 || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

bool valid_operator_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return static_cast<unsigned char>(c) >= 0x20 && c != 0x7f; });
}

json dlq_topics(const ApiContext& ctx) {
  json topics = json::array();
  for (const TopicInfo& t : ctx.kafka.topics()) {
    if (t.name.ends_with(ctx.options.dlq_suffix)) topics.push_back(t.name);
  }
  return {{"topics", std::move(topics)},
          {"replay_enabled", !ctx.options.token.empty()},
          {"suffix", ctx.options.dlq_suffix}};
}

json list_dead_letters(const ApiContext& ctx, const Params& p) {
  const std::string topic = dlq_topic_param(ctx, p);
  DlqFilter filter;
  if (const auto reason = param(p, "reason")) {
    if (reason->size() > 64 || !valid_topic_name(*reason))
      throw ApiError(400, "reason must be an error class such as handler.dead_letter");
    filter.reason = *reason;
  }
  const auto original_partition = number_param<std::int32_t>(p, "original_partition", 0, 1 << 20);
  const auto since = number_param<std::int64_t>(p, "since_ms", 0, INT64_MAX);
  const auto until = number_param<std::int64_t>(p, "until_ms", 0, INT64_MAX);
  const auto limit = number_param<std::size_t>(p, "limit", 1, 1000).value_or(200);
  const auto q = param(p, "q");
  if (q && q->size() > kMaxSearch)
    throw ApiError(400, fmt::format("q is at most {} characters", kMaxSearch));

  const auto now = std::chrono::system_clock::now();
  json letters = json::array();
  std::size_t matched = 0;
  const auto all = read_letters(ctx, topic, filter);
  for (const DeadLetterRecord& r : all) {
    if (original_partition && r.original_partition != original_partition) continue;
    const std::int64_t at = r.dead_lettered_at ? unix_ms(*r.dead_lettered_at) : -1;
    if ((since && at < *since) || (until && (at < 0 || at > *until))) continue;
    if (q && !contains_ignoring_case(r.error_message, *q)) continue;
    if (++matched <= limit) letters.push_back(summary(r, now));
  }
  return {{"topic", topic},
          {"letters", std::move(letters)},
          {"matched", matched},
          {"read", all.size()},
          {"truncated", matched > limit}};
}

json show_dead_letter(const ApiContext& ctx, const Params& p) {
  const std::string topic = dlq_topic_param(ctx, p);
  DlqFilter filter;
  filter.partition = number_param<std::int32_t>(p, "partition", 0, 1 << 20);
  filter.offset = number_param<std::int64_t>(p, "offset", 0, INT64_MAX);
  if (!filter.partition || !filter.offset) throw ApiError(400, "partition and offset are required");
  const auto letters = read_letters(ctx, topic, filter);
  if (letters.empty()) throw ApiError(404, "no such dead letter");
  const DeadLetterRecord& r = letters.front();
  json out = summary(r, std::chrono::system_clock::now());
  out["topic"] = topic;
  out["message"] = r.error_message;
  json headers = json::array();
  for (const auto& [name, value] : r.headers) headers.push_back({name, value});
  out["headers"] = std::move(headers);
  out["payload"] = r.payload.substr(0, kMaxPayloadShown);
  out["payload_truncated"] = r.payload.size() > kMaxPayloadShown;
  out["replay_enabled"] = !ctx.options.token.empty();
  return out;
}

json replay(const ApiContext& ctx, const json& body, const Requester& who, bool dry_run) {
  if (!body.is_object()) throw ApiError(400, "the body must be a JSON object");
  Params p;
  for (const char* key : {"topic", "partition", "offset"}) {
    const auto it = body.find(key);
    if (it == body.end()) throw ApiError(400, fmt::format("{} is required", key));
    p[key] = it->is_string() ? it->get<std::string>() : it->dump();
  }
  const std::string topic = dlq_topic_param(ctx, p);
  ReplayOptions options;
  options.filter.partition = number_param<std::int32_t>(p, "partition", 0, 1 << 20);
  options.filter.offset = number_param<std::int64_t>(p, "offset", 0, INT64_MAX);
  options.horizon = ctx.options.horizon;
  options.dry_run = dry_run;
  if (!dry_run && !valid_operator_name(who.operator_name)) {
    throw ApiError(400, "operator: say who you are (1 to 64 printable characters)");
  }

  std::int64_t audit_id = 0;
  if (!dry_run) {
    const auto letters = read_letters(ctx, topic, options.filter);
    if (letters.empty()) throw ApiError(404, "no such dead letter");
    const DeadLetterRecord& r = letters.front();
    ReplayAuditEntry entry;
    entry.started_at = std::chrono::floor<milliseconds>(std::chrono::system_clock::now());
    entry.operator_name = who.operator_name;
    entry.remote_addr = who.remote_addr;
    entry.dlq_topic = topic;
    entry.dlq_partition = r.partition;
    entry.dlq_offset = r.offset;
    if (r.event_id) entry.event_id = r.event_id->to_string();
    entry.target_topic = r.original_topic;
    audit_id = ctx.store.with([&](Store& s) { return insert_replay_audit(s, entry); });
  }
  ReplayReport report;
  try {
    // The code of `idem dlq replay`: same selection, horizon check, producer and headers.
    report = replay_dead_letters(ctx.options.kafka, topic, options);
  } catch (const std::exception& e) {
    if (audit_id != 0) {
      ctx.store.with([&](Store& s) { finish_replay_audit(s, audit_id, "error", e.what()); });
    }
    throw ApiError(502, e.what());
  }
  if (report.items.empty()) throw ApiError(404, "no such dead letter");
  const ReplayItem& item = report.items.front();
  std::string detail = item.error;
  if (item.action == ReplayAction::RefusedStale) {
    detail = fmt::format(
        "the event is past the dedup horizon ({} h): its dedup rows may be gone, "
        "so a replay could apply it twice; use `idem dlq replay --force`",
        options.horizon.stale_age().count() / 3'600'000);
  } else if (item.action == ReplayAction::NoTarget) {
    detail = "no idem.original.topic header: use `idem dlq replay --to`";
  }
  if (audit_id != 0) {
    ctx.store.with(
        [&](Store& s) { finish_replay_audit(s, audit_id, to_string(item.action), detail); });
  }
  return {
      {"dry_run", dry_run},
      {"audit_id", audit_id == 0 ? json() : json(audit_id)},
      {"action", to_string(item.action)},
      {"target_topic", item.target_topic},
      {"event_id", item.record.event_id ? json(item.record.event_id->to_string()) : json()},
      {"key", item.record.key},
      {"payload_bytes", item.record.payload.size()},
      {"headers_kept", std::count_if(item.record.headers.begin(), item.record.headers.end(),
                                     [](const auto& h) { return !h.first.starts_with("idem."); })},
      {"detail", detail}};
}

json audit(const ApiContext& ctx) {
  json entries = json::array();
  for (const auto& e : ctx.store.with([](Store& s) { return list_replay_audit(s, 100); })) {
    entries.push_back({{"id", e.id},
                       {"started_at_ms", unix_ms(e.started_at)},
                       {"operator", e.operator_name},
                       {"remote_addr", e.remote_addr},
                       {"dlq_topic", e.dlq_topic},
                       {"dlq_partition", e.dlq_partition},
                       {"dlq_offset", e.dlq_offset},
                       {"event_id", e.event_id ? json(*e.event_id) : json()},
                       {"target_topic", e.target_topic},
                       {"outcome", e.outcome},
                       {"detail", e.detail}});
  }
  return {{"entries", std::move(entries)}};
}

json dedup_health(const ApiContext& ctx) {
  const DedupHorizon& h = ctx.options.horizon;
  const auto now = std::chrono::system_clock::now();
  json out = {{"horizon",
               {{"retention_ms", milliseconds(h.retention).count()},
                {"safety_margin_ms", milliseconds(h.safety_margin).count()},
                {"stale_age_ms", h.stale_age().count()}}},
              {"now_ms", unix_ms(now)}};
  out["groups"] = section([&] {
    json groups = json::array();
    for (const auto& g : ctx.store.with([](Store& s) { return dedup_group_stats(s); })) {
      const auto born = [](const std::optional<Uuid>& id) {
        return id && id->is_v7() ? json(unix_ms(id->timestamp())) : json();
      };
      groups.push_back(
          {{"group", g.group},
           {"rows", g.rows},
           {"oldest_event_born_ms", born(g.oldest_event)},
           {"newest_event_born_ms", born(g.newest_event)},
           {"first_processed_ms", g.first_processed ? json(unix_ms(*g.first_processed)) : json()},
           {"last_processed_ms", g.last_processed ? json(unix_ms(*g.last_processed)) : json()}});
    }
    return json{{"rows", std::move(groups)}};
  });
  out["retention"] = section([&] {
    json declarations = json::array();
    for (const auto& d : ctx.store.with([](Store& s) { return dedup_retention_declarations(s); })) {
      declarations.push_back({{"group", d.consumer_group},
                              {"retention_ms", d.retention.count()},
                              {"declared_by", d.declared_by},
                              {"renewed_at_ms", unix_ms(d.renewed_at)},
                              {"expires_at_ms", unix_ms(d.expires_at())},
                              {"live", d.expires_at() > now}});
    }
    const DroppedDedupMarks dropped =
        ctx.store.with([](Store& s) { return dropped_dedup_marks(s); });
    return json{{"declarations", std::move(declarations)},
                {"dropped",
                 {{"born_before_ms", unix_ms(dropped.born_before)},
                  {"dropped_at_ms", unix_ms(dropped.dropped_at)},
                  {"retention_ms", dropped.retention.count()}}}};
  });
  out["partitions"] = section([&] {
    return ctx.store.with([](Store& s) {
      const auto parts = dedup_partitions(s);
      json list = json::array();
      if (parts) {
        for (const auto& part : *parts) {
          list.push_back({{"name", part.name},
                          {"is_default", part.is_default},
                          {"from_ms", part.is_default ? json() : json(unix_ms(part.from))},
                          {"to_ms", part.is_default ? json() : json(unix_ms(part.to))}});
        }
      }
      return json{{"partitioned", parts.has_value()}, {"list", std::move(list)}};
    });
  });
  out["outbox"] = section([&] {
    const OutboxLag lag = ctx.store.with([](Store& s) { return outbox_lag(s); });
    return json{{"backlog", lag.backlog},
                {"oldest_unpublished_age_ms", optional_ms(lag.oldest_unpublished_age)},
                {"rejected", lag.rejected}};
  });
  return out;
}

}  // namespace idem::console
