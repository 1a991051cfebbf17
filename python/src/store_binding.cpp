// The store and its transactions across the binding (store_binding.hpp). Every call that
// talks to the database releases the GIL, so other Python threads run while it waits.
#include "store_binding.hpp"

#include <memory>
#include <string>
#include <utility>

#include "idem/error.hpp"
#include "idem/store.hpp"
#include "python_values.hpp"

namespace py = pybind11;

namespace idem::python {
namespace {

class PyTransaction {
 public:
  PyTransaction(std::unique_ptr<Transaction> tx, Backend backend)
      : tx_(std::move(tx)), backend_(backend) {}

  py::tuple execute(const std::string& sql, const py::args& args) {
    const std::vector<Param> params = to_params(args);
    Rows rows;
    {
      py::gil_scoped_release unlocked;
      rows = open().execute_params(sql, params);
    }
    return to_python(rows, backend_);
  }

  void defer(const std::string& sql, const py::args& args) {
    const std::vector<Param> params = to_params(args);
    py::gil_scoped_release unlocked;
    open().execute_deferred_params(sql, params);
  }

  void sync() {
    py::gil_scoped_release unlocked;
    open().sync();
  }

  void commit() {
    py::gil_scoped_release unlocked;
    open().commit();
  }

  void rollback() {
    py::gil_scoped_release unlocked;
    if (tx_) tx_->rollback();
  }

  [[nodiscard]] bool active() const { return tx_ && tx_->active(); }

 private:
  Transaction& open() {
    if (!tx_ || !tx_->active()) {
      throw Error(ErrorCode::InvalidArgument, ErrorSource::Internal,
                  "the transaction is finished (committed or rolled back)");
    }
    return *tx_;
  }

  std::unique_ptr<Transaction> tx_;
  Backend backend_;
};

class PyStore {
 public:
  PyStore(const std::string& url, const std::string& application_name, double connect_timeout) {
    StoreOptions options;
    options.application_name = application_name;
    options.connect_timeout = std::chrono::seconds(static_cast<long long>(connect_timeout));
    py::gil_scoped_release unlocked;
    store_ = open_store(url, options);
  }

  PyTransaction begin() {
    Store& store = open();
    py::gil_scoped_release unlocked;
    return {store.begin(), store.backend()};
  }

  py::list migrate() {
    Store& store = open();
    MigrationReport report;
    {
      py::gil_scoped_release unlocked;
      report = store.migrate();
    }
    py::list applied;
    for (const auto& name : report.applied) applied.append(name);
    return applied;
  }

  [[nodiscard]] std::string backend() { return std::string(to_string(open().backend())); }

 private:
  // The connection closes when the last reference to the store (its own, or a
  // transaction's) is gone: there is no close() that could leave a transaction dangling.
  Store& open() { return *store_; }

  std::unique_ptr<Store> store_;
};

}  // namespace

void bind_store(py::module_& module) {
  py::class_<PyTransaction>(module, "Transaction")
      .def("execute", &PyTransaction::execute, py::arg("sql"))
      .def("defer", &PyTransaction::defer, py::arg("sql"))
      .def("sync", &PyTransaction::sync)
      .def("commit", &PyTransaction::commit)
      .def("rollback", &PyTransaction::rollback)
      .def_property_readonly("active", &PyTransaction::active);
  py::class_<PyStore>(module, "Store")
      .def(py::init<const std::string&, const std::string&, double>(), py::arg("url"),
           py::arg("application_name") = "idem-python", py::arg("connect_timeout") = 10.0)
      // The store outlives each transaction it began.
      .def("begin", &PyStore::begin, py::keep_alive<0, 1>())
      .def("migrate", &PyStore::migrate)
      .def_property_readonly("backend", &PyStore::backend);
}

}  // namespace idem::python
