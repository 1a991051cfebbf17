#pragma once
// valijson reads a document through an adapter; this one reads the core's JsonValue, the
// tree of the record's one parse (EventReader), so that a route's schema check parses
// nothing again. It follows the shape of valijson's own adapters (valijson/adapters/):
// BasicAdapter over a value class, with an array, an object, their iterators, and a frozen
// value for what valijson keeps of a document. Written here because valijson ships
// adapters for other JSON libraries only, and simdjson's DOM is behind JsonValue.
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/internal/adapter.hpp>
#include <valijson/internal/basic_adapter.hpp>
#include <valijson/internal/frozen_value.hpp>

#include "idem/events/event_reader.hpp"

namespace idem::sinks::detail {

class JsonValueAdapter;
using JsonValueObjectMember = std::pair<std::string, JsonValueAdapter>;
JsonValueAdapter element_of(const JsonValue& element);
JsonValueObjectMember member_of(const JsonValue::Member& member);

/// An iterator over a list read once per visit (an array's elements, an object's members),
/// which its copies share; `Read` makes what valijson reads of an entry.
template <class Entry, class Item, Item (*Read)(const Entry&)>
class JsonValueListIterator {
 public:
  using iterator_category = std::bidirectional_iterator_tag;
  // As valijson's own adapters declare them.
  using value_type = Item;
  using difference_type = Item;
  using pointer = Item*;
  using reference = Item&;

  JsonValueListIterator(std::shared_ptr<const std::vector<Entry>> list, std::size_t at)
      : list_(std::move(list)), at_(at) {}

  Item operator*() const { return Read((*list_)[at_]); }
  valijson::adapters::DerefProxy<Item> operator->() const {
    return valijson::adapters::DerefProxy<Item>(**this);
  }
  bool operator==(const JsonValueListIterator& other) const { return at_ == other.at_; }
  bool operator!=(const JsonValueListIterator& other) const { return at_ != other.at_; }
  const JsonValueListIterator& operator++() {
    ++at_;
    return *this;
  }
  JsonValueListIterator operator++(int) {
    JsonValueListIterator before = *this;
    ++at_;
    return before;
  }
  const JsonValueListIterator& operator--() {
    --at_;
    return *this;
  }
  void advance(std::ptrdiff_t n) {
    at_ = static_cast<std::size_t>(static_cast<std::ptrdiff_t>(at_) + n);
  }

 private:
  std::shared_ptr<const std::vector<Entry>> list_;
  std::size_t at_;
};

using JsonValueArrayIterator = JsonValueListIterator<JsonValue, JsonValueAdapter, &element_of>;
using JsonValueObjectIterator =
    JsonValueListIterator<JsonValue::Member, JsonValueObjectMember, &member_of>;

/// An array's elements, read once per visit (JsonValue::elements() makes the list).
class JsonValueArray {
 public:
  using const_iterator = JsonValueArrayIterator;
  using iterator = JsonValueArrayIterator;

  JsonValueArray() : elements_(std::make_shared<std::vector<JsonValue>>()) {}
  explicit JsonValueArray(const JsonValue& value)
      : elements_(std::make_shared<std::vector<JsonValue>>(value.elements())) {}

  [[nodiscard]] JsonValueArrayIterator begin() const;
  [[nodiscard]] JsonValueArrayIterator end() const;
  [[nodiscard]] std::size_t size() const { return elements_->size(); }

 private:
  std::shared_ptr<const std::vector<JsonValue>> elements_;
};

/// An object's members in document order, read once per visit.
class JsonValueObject {
 public:
  using const_iterator = JsonValueObjectIterator;
  using iterator = JsonValueObjectIterator;

  JsonValueObject() : members_(std::make_shared<std::vector<JsonValue::Member>>()) {}
  explicit JsonValueObject(const JsonValue& value)
      : members_(std::make_shared<std::vector<JsonValue::Member>>(value.members())) {}

  [[nodiscard]] JsonValueObjectIterator begin() const;
  [[nodiscard]] JsonValueObjectIterator end() const;
  /// The first member named `name` (as a lookup by JSON pointer takes the first).
  [[nodiscard]] JsonValueObjectIterator find(const std::string& name) const;
  [[nodiscard]] std::size_t size() const { return members_->size(); }

 private:
  std::shared_ptr<const std::vector<JsonValue::Member>> members_;
};

/// What valijson keeps of a value past the document's life: a copy as nlohmann::json
/// (numbers through their double, as JsonValue::compact writes them).
class JsonValueFrozenValue : public valijson::adapters::FrozenValue {
 public:
  explicit JsonValueFrozenValue(nlohmann::json value) : value_(std::move(value)) {}
  [[nodiscard]] FrozenValue* clone() const override { return new JsonValueFrozenValue(value_); }
  [[nodiscard]] bool equalTo(const valijson::adapters::Adapter& other, bool strict) const override {
    return valijson::adapters::NlohmannJsonAdapter(value_).equalTo(other, strict);
  }

 private:
  nlohmann::json value_;
};

/// The value class BasicAdapter is built on. A default one is an empty object, as in
/// valijson's adapters.
class JsonValueValue {
 public:
  JsonValueValue() = default;
  explicit JsonValueValue(const JsonValue& value) : value_(value) {}

  [[nodiscard]] valijson::adapters::FrozenValue* freeze() const {
    return new JsonValueFrozenValue(value_ ? nlohmann::json::parse(value_->compact())
                                           : nlohmann::json::object());
  }

  [[nodiscard]] opt::optional<JsonValueArray> getArrayOptional() const {
    if (!isArray()) return {};
    return JsonValueArray(*value_);
  }
  bool getArraySize(std::size_t& result) const {
    if (!isArray()) return false;
    result = value_->size();
    return true;
  }
  bool getBool(bool& result) const {
    if (!isBool()) return false;
    result = *value_->as_bool();
    return true;
  }
  bool getDouble(double& result) const {
    if (!isNumber()) return false;
    result = *value_->as_double();
    return true;
  }
  bool getInteger(std::int64_t& result) const {
    if (!value_ || value_->kind() != JsonKind::Integer) return false;
    result = *value_->as_int64();
    return true;
  }
  [[nodiscard]] opt::optional<JsonValueObject> getObjectOptional() const {
    if (!value_) return JsonValueObject();
    if (!isObject()) return {};
    return JsonValueObject(*value_);
  }
  bool getObjectSize(std::size_t& result) const {
    if (!isObject()) return false;
    result = value_ ? value_->size() : 0;
    return true;
  }
  bool getString(std::string& result) const {
    if (!isString()) return false;
    result = std::string(*value_->as_string());
    return true;
  }

  static bool hasStrictTypes() { return true; }
  [[nodiscard]] bool isArray() const { return is(JsonKind::Array); }
  [[nodiscard]] bool isBool() const { return is(JsonKind::Bool); }
  [[nodiscard]] bool isDouble() const { return is(JsonKind::Number); }
  /// An integer that fits int64_t; one from 2^63 up is a number valijson reads as a double.
  [[nodiscard]] bool isInteger() const { return is(JsonKind::Integer); }
  [[nodiscard]] bool isNull() const { return is(JsonKind::Null); }
  [[nodiscard]] bool isNumber() const { return value_ && value_->is_number(); }
  [[nodiscard]] bool isObject() const { return !value_ || is(JsonKind::Object); }
  [[nodiscard]] bool isString() const { return is(JsonKind::String); }

 private:
  [[nodiscard]] bool is(JsonKind kind) const { return value_ && value_->kind() == kind; }

  opt::optional<JsonValue> value_;
};

class JsonValueAdapter : public valijson::adapters::BasicAdapter<JsonValueAdapter, JsonValueArray,
                                                                 JsonValueObjectMember,
                                                                 JsonValueObject, JsonValueValue> {
 public:
  explicit JsonValueAdapter(const JsonValue& value) : BasicAdapter(JsonValueValue(value)) {}
};

inline JsonValueAdapter element_of(const JsonValue& element) {
  return JsonValueAdapter(element);
}
inline JsonValueObjectMember member_of(const JsonValue::Member& member) {
  return {std::string(member.key), JsonValueAdapter(member.value)};
}

inline JsonValueArrayIterator JsonValueArray::begin() const {
  return {elements_, 0};
}
inline JsonValueArrayIterator JsonValueArray::end() const {
  return {elements_, elements_->size()};
}
inline JsonValueObjectIterator JsonValueObject::begin() const {
  return {members_, 0};
}
inline JsonValueObjectIterator JsonValueObject::end() const {
  return {members_, members_->size()};
}
inline JsonValueObjectIterator JsonValueObject::find(const std::string& name) const {
  for (std::size_t i = 0; i < members_->size(); ++i) {
    if ((*members_)[i].key == name) return {members_, i};
  }
  return end();
}

}  // namespace idem::sinks::detail

template <>
struct valijson::adapters::AdapterTraits<idem::sinks::detail::JsonValueAdapter> {
  using DocumentType = idem::JsonValue;
  static std::string adapterName() { return "JsonValueAdapter"; }
};
