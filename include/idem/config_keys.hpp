#pragma once
/// \file
/// How a part of idem (the core, a component, a command) declares its configuration keys
/// to the one loader (idem/config.hpp): a plain settings struct `S` whose members are
/// bound to key names. A key's default is the member's value in a default-constructed
/// `S`, so every default is written once, where the member is declared, and the loader,
/// `idem config check` and the struct cannot disagree.
///
///   void declare_keys(SectionKeys<ProviderConfig>& keys) {
///     keys.duration("provider.key_retention", &ProviderConfig::key_retention,
///                   "how long an Idempotency-Key is remembered", 0, 3650 * kConfigDay);
///   }
///   ConfigSchema schema;
///   schema.add<ProviderConfig>(declare_keys);
///   const Config config = load_config(sources, schema);
///   const ProviderConfig& provider = config.get<ProviderConfig>();
///
/// A binding names a member either as a pointer to member (`&S::m`) or as a function
/// returning a reference to it (`[](S& s) -> auto& { return s.retry.jitter; }`, for
/// nested members).

#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace idem {

/// One second, hour and day in milliseconds: the unit of duration bounds.
inline constexpr double kConfigSecond = 1000;
inline constexpr double kConfigHour = 3600 * kConfigSecond;
inline constexpr double kConfigDay = 24 * kConfigHour;

/// How a key's value is written. Duration: parse_duration() text, bounds in
/// milliseconds. List: comma-separated (a TOML array in the file); with choices, every
/// element must be one of them.
enum class KeyType { String, Integer, Number, Boolean, List, Choice, Duration, DurationList };

/// One configuration key as the loader and `idem config check` know it.
struct KeySpec {
  std::string name;
  KeyType type = KeyType::String;
  std::string default_value;  ///< as text; empty: no default
  std::string help;
  double min = 0;  ///< Integer, Number, Duration (ms): inclusive bounds
  double max = 0;
  std::vector<std::string> choices;  ///< Choice, List: the allowed values (empty: any)
  /// Conventional environment variables read for this key (after IDEM_<KEY>, which wins).
  std::vector<std::string> conventional_env;
  /// Duration: what a bare number means (`ms` for the keys that once carried `_ms` in
  /// their names); empty: a unit is needed.
  std::string unit_of_bare_number;
  /// Older names of this key that the loader still reads, in the file, as `IDEM_<OLD>` and
  /// with `--set`, each use with a warning; setting an old name and the key both is an
  /// error (config.hpp).
  std::vector<std::string> renamed_from;
};

/// What a section's own checks report to: problems, each naming its key, and the keys'
/// values as given (for messages; a secret is never shown).
class SectionProblems {
 public:
  virtual ~SectionProblems() = default;
  /// Records a problem with `key` (its origin is added by the loader).
  virtual void fail(std::string_view key, std::string message) = 0;
  /// `'value'` of `key` as given, or `<redacted>` for a secret.
  [[nodiscard]] virtual std::string shown(std::string_view key) const = 0;
};

namespace detail {

// The loader's parsers, shared by every section: each returns the problem with `text`
// (naming the expected form and the bounds), or nullopt and sets `out`.
std::optional<std::string> parse_integer(const KeySpec& spec, std::string_view text,
                                         std::int64_t& out);
std::optional<std::string> parse_number(const KeySpec& spec, std::string_view text, double& out);
std::optional<std::string> parse_boolean(std::string_view text, bool& out);
std::optional<std::string> parse_listen(std::string_view text);
std::optional<std::string> parse_duration_value(const KeySpec& spec, std::string_view text,
                                                std::chrono::milliseconds& out);
std::optional<std::string> parse_list(const KeySpec& spec, std::string_view text,
                                      std::vector<std::string>& out);
std::optional<std::string> parse_choice(const KeySpec& spec, std::string_view text,
                                        std::size_t& index);
/// `d` as a default's text: a bare number in `unit_of_bare_number` when one is set (the
/// `_ms` and `_hours` keys have always shown their defaults so), else format_duration().
std::string duration_text(std::chrono::milliseconds d, std::string_view unit_of_bare_number);
std::string number_text(double d);

/// A key of a section, type-erased: applies a non-empty value to the section's object.
struct KeyBinding {
  KeySpec spec;
  std::function<std::optional<std::string>(void* section, std::string_view text)> apply;
};

/// Everything one section declared.
struct SectionDeclaration {
  std::vector<KeyBinding> keys;
  std::vector<std::function<void(void* section, SectionProblems& problems)>> checks;
};

template <class T>
struct IsOptional : std::false_type {};
template <class T>
struct IsOptional<std::optional<T>> : std::true_type {};

template <class T>
struct IsDuration : std::false_type {};
template <class Rep, class Period>
struct IsDuration<std::chrono::duration<Rep, Period>> : std::true_type {};

}  // namespace detail

/// Declares the keys of one settings struct `S` (see the file comment). Used only inside
/// the declaring function passed to ConfigSchema::add().
template <class S>
class SectionKeys {
 public:
  explicit SectionKeys(detail::SectionDeclaration& out) : out_(out) {}

  /// Free text.
  template <class Field>
  SectionKeys& text(std::string_view name, Field field, std::string_view help) {
    return bind<Field>(spec(name, KeyType::String, help), field,
                       [](auto& member, std::string_view value) -> std::optional<std::string> {
                         member = std::string(value);
                         return std::nullopt;
                       });
  }

  /// `host:port` (port 0 to 65535; 0: any free port), the form of every `*.listen` key.
  template <class Field>
  SectionKeys& listen(std::string_view name, Field field, std::string_view help) {
    return bind<Field>(spec(name, KeyType::String, help), field,
                       [](auto& member, std::string_view value) {
                         auto problem = detail::parse_listen(value);
                         if (!problem) member = std::string(value);
                         return problem;
                       });
  }

  /// An integer in [min, max]; the member may be any integer type or an optional of one.
  template <class Field>
  SectionKeys& integer(std::string_view name, Field field, std::string_view help, double min,
                       double max) {
    KeySpec k = spec(name, KeyType::Integer, help);
    k.min = min;
    k.max = max;
    return bind<Field>(std::move(k), field, [k](auto& member, std::string_view value) {
      std::int64_t n = 0;
      auto problem = detail::parse_integer(k, value, n);
      if (!problem) member = static_cast<Value<std::remove_reference_t<decltype(member)>>>(n);
      return problem;
    });
  }

  /// A real number in [min, max].
  template <class Field>
  SectionKeys& number(std::string_view name, Field field, std::string_view help, double min,
                      double max) {
    KeySpec k = spec(name, KeyType::Number, help);
    k.min = min;
    k.max = max;
    return bind<Field>(std::move(k), field, [k](auto& member, std::string_view value) {
      double d = 0;
      auto problem = detail::parse_number(k, value, d);
      if (!problem) member = d;
      return problem;
    });
  }

  /// true/false (also 1/0, yes/no).
  template <class Field>
  SectionKeys& boolean(std::string_view name, Field field, std::string_view help) {
    return bind<Field>(spec(name, KeyType::Boolean, help), field,
                       [](auto& member, std::string_view value) {
                         bool b = false;
                         auto problem = detail::parse_boolean(value, b);
                         if (!problem) member = b;
                         return problem;
                       });
  }

  /// A duration in [min, max] milliseconds, into a std::chrono::duration member (or an
  /// optional of one). A member counting whole hours refuses other values instead of
  /// cutting them; a member in seconds keeps the whole seconds. `unit_of_bare_number`:
  /// what a bare number means (the keys whose old names carried a unit keep it, so old
  /// files keep their meaning); empty: a unit is required.
  template <class Field>
  SectionKeys& duration(std::string_view name, Field field, std::string_view help, double min,
                        double max, std::string_view unit_of_bare_number = {}) {
    KeySpec k = spec(name, KeyType::Duration, help);
    k.min = min;
    k.max = max;
    k.unit_of_bare_number = std::string(unit_of_bare_number);
    return bind<Field>(std::move(k), field, [k](auto& member, std::string_view value) {
      using D = Value<std::remove_reference_t<decltype(member)>>;
      std::chrono::milliseconds ms{0};
      auto problem = detail::parse_duration_value(k, value, ms);
      if (problem) return problem;
      if constexpr (std::is_same_v<typename D::period, std::ratio<3600>>) {
        if (ms % std::chrono::hours(1) != std::chrono::milliseconds(0))
          return std::optional<std::string>("must be a whole number of hours, got '" +
                                            std::string(value) + "'");
      }
      member = std::chrono::duration_cast<D>(ms);
      return problem;
    });
  }

  /// A comma-separated list (a TOML array in the file); with `choices`, every element
  /// must be one of them.
  template <class Field>
  SectionKeys& list(std::string_view name, Field field, std::string_view help,
                    std::vector<std::string> choices = {}) {
    KeySpec k = spec(name, KeyType::List, help);
    k.choices = std::move(choices);
    return bind<Field>(std::move(k), field, [k](auto& member, std::string_view value) {
      std::vector<std::string> items;
      auto problem = detail::parse_list(k, value, items);
      if (!problem) member = std::move(items);
      return problem;
    });
  }

  /// A list of durations, each in [min, max] milliseconds.
  template <class Field>
  SectionKeys& duration_list(std::string_view name, Field field, std::string_view help, double min,
                             double max) {
    KeySpec k = spec(name, KeyType::DurationList, help);
    k.min = min;
    k.max = max;
    return bind<Field>(std::move(k), field, [k](auto& member, std::string_view value) {
      std::vector<std::string> items;
      auto problem = detail::parse_list(k, value, items);
      std::vector<std::chrono::milliseconds> out;
      for (const std::string& item : items) {
        if (problem) break;
        std::chrono::milliseconds d{0};
        problem = detail::parse_duration_value(k, item, d);
        out.push_back(d);
      }
      if (!problem) member = std::move(out);
      return problem;
    });
  }

  /// One of `choices` (text, value), into an enum (or any comparable) member.
  template <class Field, class E>
  SectionKeys& choice(std::string_view name, Field field, std::string_view help,
                      std::vector<std::pair<std::string, E>> choices) {
    KeySpec k = spec(name, KeyType::Choice, help);
    for (const auto& c : choices) {
      k.choices.push_back(c.first);
      if (c.second == default_member(field)) k.default_value = c.first;
    }
    return bind<Field>(std::move(k), field, [k, choices](auto& member, std::string_view value) {
      std::size_t index = 0;
      auto problem = detail::parse_choice(k, value, index);
      if (!problem) member = choices[index].second;
      return problem;
    });
  }

  /// One of `choices`, kept as text (a member holding the chosen name).
  template <class Field>
  SectionKeys& choice_text(std::string_view name, Field field, std::string_view help,
                           std::vector<std::string> choices) {
    KeySpec k = spec(name, KeyType::Choice, help);
    k.choices = std::move(choices);
    return bind<Field>(std::move(k), field, [k](auto& member, std::string_view value) {
      std::size_t index = 0;
      auto problem = detail::parse_choice(k, value, index);
      if (!problem) member = k.choices[index];
      return problem;
    });
  }

  /// A key parsed by `parse`, which returns the problem with the text or nullopt. Its
  /// spec (type, help, default as text) is given whole: for values no typed binding
  /// above covers (`NAME:PARTITIONS` lists, say).
  SectionKeys& custom(KeySpec key,
                      std::function<std::optional<std::string>(S&, std::string_view)> parse) {
    out_.keys.push_back({std::move(key), [parse = std::move(parse)](void* s, std::string_view v) {
                           return parse(*static_cast<S*>(s), v);
                         }});
    return *this;
  }

  /// An older name of the key declared last (`relay.retention_hours` for
  /// `relay.retention`), still read with a warning (KeySpec::renamed_from).
  SectionKeys& renamed_from(std::string_view old_name) {
    out_.keys.back().spec.renamed_from.emplace_back(old_name);
    return *this;
  }

  /// A conventional environment variable for the key declared last (`PGHOST` for
  /// `postgres.host`); `IDEM_<KEY>` still wins over it.
  SectionKeys& env(std::string_view variable) {
    out_.keys.back().spec.conventional_env.emplace_back(variable);
    return *this;
  }

  /// Runs once every key of the section was applied: checks across its keys, and fills
  /// members derived from several keys.
  SectionKeys& check(std::function<void(S&, SectionProblems&)> fn) {
    out_.checks.push_back([fn = std::move(fn)](void* s, SectionProblems& problems) {
      fn(*static_cast<S*>(s), problems);
    });
    return *this;
  }

 private:
  template <class M>
  using Value =
      typename std::conditional_t<detail::IsOptional<M>::value, M, std::optional<M>>::value_type;

  static KeySpec spec(std::string_view name, KeyType type, std::string_view help) {
    KeySpec k;
    k.name = std::string(name);
    k.type = type;
    k.help = std::string(help);
    return k;
  }

  static const S& defaults() {
    static const S instance{};
    return instance;
  }

  template <class M>
  static std::string default_text(const M& m, const KeySpec& k) {
    if constexpr (detail::IsOptional<M>::value) {
      return m ? default_text(*m, k) : std::string();
    } else if constexpr (std::is_same_v<M, std::string>) {
      return m;
    } else if constexpr (std::is_same_v<M, bool>) {
      return m ? "true" : "false";
    } else if constexpr (detail::IsDuration<M>::value) {
      return detail::duration_text(std::chrono::duration_cast<std::chrono::milliseconds>(m),
                                   k.unit_of_bare_number);
    } else if constexpr (std::is_same_v<M, std::vector<std::string>>) {
      std::string out;
      for (const auto& item : m) out += (out.empty() ? "" : ",") + item;
      return out;
    } else if constexpr (std::is_same_v<M, std::vector<std::chrono::milliseconds>>) {
      std::string out;
      for (const auto& item : m) out += (out.empty() ? "" : ",") + detail::duration_text(item, {});
      return out;
    } else if constexpr (std::is_floating_point_v<M>) {
      return detail::number_text(m);
    } else {
      static_assert(std::is_integral_v<M>, "no default text for this member type");
      return std::to_string(m);
    }
  }

  template <class Field>
  static const auto& default_member(Field field) {
    return std::invoke(field, const_cast<S&>(defaults()));  // only read
  }

  template <class Field, class Apply>
  SectionKeys& bind(KeySpec k, Field field, Apply apply) {
    // An enum's default is named by choice(), which knows the names.
    using M = std::remove_cvref_t<decltype(default_member(field))>;
    if constexpr (!std::is_enum_v<M>) k.default_value = default_text(default_member(field), k);
    out_.keys.push_back({std::move(k), [field, apply](void* s, std::string_view value) {
                           return apply(std::invoke(field, *static_cast<S*>(s)), value);
                         }});
    return *this;
  }

  detail::SectionDeclaration& out_;
};

}  // namespace idem
