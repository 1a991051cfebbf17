#pragma once
// idem._idem.HandlerTx: the transaction a Python handler gets, the batch's, valid during
// the handler call only (close()). A store error it raises is kept, so that the consumer
// classifies it as it classifies a C++ handler's (transient: retry; a statement no event
// could make work: stop).
#include <pybind11/pybind11.h>

#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "idem/error.hpp"
#include "idem/store.hpp"

namespace idem::python {

class HandlerTx {
  // Runs `call`, keeping the store error it throws (defined first: the members below
  // deduce their types from it).
  template <class Call>
  auto kept(Call call) {
    try {
      return call();
    } catch (const Error&) {
      last_error_ = std::current_exception();
      throw;
    }
  }

 public:
  HandlerTx(Transaction& tx, Backend backend) : tx_(&tx), backend_(backend) {}

  /// Runs at once and returns (columns, rows, rowcount); the GIL is released meanwhile.
  pybind11::tuple execute(const std::string& sql, const pybind11::args& args);
  /// Queues the statement (Transaction::execute_deferred).
  void defer(const std::string& sql, const pybind11::args& args);
  /// An outbox row in this transaction (Outbox::enqueue), published by `idem relay` once
  /// the batch commits; `payload` makes the value from the event id born here.
  pybind11::object publish(const std::string& topic, const std::string& key,
                           const pybind11::function& payload, const std::string& aggregate_type,
                           const std::vector<std::pair<std::string, std::string>>& headers);

  void close() noexcept { tx_ = nullptr; }
  [[nodiscard]] bool active() const noexcept { return tx_ != nullptr; }
  /// The store error this transaction raised last, or null.
  [[nodiscard]] std::exception_ptr last_error() const noexcept { return last_error_; }

  static void bind(pybind11::module_& module);

 private:
  Transaction& open();

  Transaction* tx_;
  Backend backend_;
  std::exception_ptr last_error_;
};

}  // namespace idem::python
