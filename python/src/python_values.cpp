// Values across the binding (python_values.hpp).
#include "python_values.hpp"

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace py = pybind11;

namespace idem::python {
namespace {

// The Python types the conversions need, imported once per process (the binding runs in
// one interpreter; the objects are never released, as a module-level global would not be).
struct PythonTypes {
  py::object decimal = py::module_::import("decimal").attr("Decimal");
  py::object uuid = py::module_::import("uuid").attr("UUID");
  py::object datetime = py::module_::import("datetime").attr("datetime");
  py::object date = py::module_::import("datetime").attr("date");
  py::object from_iso = datetime.attr("fromisoformat");
  py::object json_loads = py::module_::import("json").attr("loads");
  py::object json_text = py::module_::import("idem._json").attr("dumps");
  py::object bytes_from_hex = py::module_::import("builtins").attr("bytes").attr("fromhex");
};

const PythonTypes& types() {
  static const auto* t = new PythonTypes();  // never destroyed: see PythonTypes
  return *t;
}

std::string_view type_name(const py::handle& value) {
  return Py_TYPE(value.ptr())->tp_name;
}

py::object integer(std::string_view text) {
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc() && end == text.data() + text.size()) return py::int_(v);
  // Out of 64 bits (a PostgreSQL numeric is never typed Integer; a SQLite INTEGER always
  // fits), or not an integer at all: Python's own parser says which.
  return py::reinterpret_steal<py::object>(
      PyLong_FromString(std::string(text).c_str(), nullptr, 10));
}

py::object boolean(std::string_view text) {
  return py::bool_(text == "t" || text == "true" || text == "1");
}

// PostgreSQL prints bytea as `\x` and hex digits; SQLite hands over the raw bytes.
py::object bytes_of(std::string_view text, bool postgres_hex) {
  if (postgres_hex && text.starts_with("\\x")) {
    return py::module_::import("builtins")
        .attr("bytes")
        .attr("fromhex")(py::str(text.data() + 2, text.size() - 2));
  }
  return py::bytes(text.data(), text.size());
}

py::object cell(const Rows& rows, std::size_t row, std::size_t col, Backend backend) {
  const auto& text = rows.cell(row, col);
  if (!text) return py::none();
  const std::string_view t = *text;
  const PythonTypes& py_types = types();
  switch (rows.type(row, col)) {
    case ValueType::Null: return py::none();
    case ValueType::Integer: return integer(t);
    case ValueType::Decimal: return py_types.decimal(py::str(t.data(), t.size()));
    case ValueType::Real:
      return py::reinterpret_steal<py::object>(
          PyFloat_FromString(py::str(t.data(), t.size()).ptr()));
    case ValueType::Boolean: return boolean(t);
    case ValueType::UuidValue:
      if (t.size() == 16) return py_types.uuid(py::arg("bytes") = py::bytes(t.data(), t.size()));
      return py_types.uuid(py::str(t.data(), t.size()));
    case ValueType::TimestampValue:
      // PostgreSQL prints "2026-12-05 19:50:35.123+00", which fromisoformat reads;
      // 'infinity' and other text it cannot read stay text.
      try {
        return py_types.from_iso(py::str(t.data(), t.size()));
      } catch (const py::error_already_set&) {
        return py::str(t.data(), t.size());
      }
    case ValueType::Json:
      return py_types.json_loads(py::str(t.data(), t.size()),
                                 py::arg("parse_float") = py_types.decimal);
    case ValueType::Bytes: return bytes_of(t, backend == Backend::Postgres);
    case ValueType::Text: return py::str(t.data(), t.size());
  }
  return py::str(t.data(), t.size());
}

}  // namespace

Param to_param(const py::handle& value, std::size_t position) {
  if (value.is_none()) return Param(nullptr);
  // bool before int: Python's bool is an int.
  if (PyBool_Check(value.ptr())) return Param(value.ptr() == Py_True);
  if (PyLong_Check(value.ptr())) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
    if (overflow == 0) return Param(static_cast<std::int64_t>(v));
    return Param(py::str(value).cast<std::string>());  // beyond 64 bits: exact text
  }
  if (PyFloat_Check(value.ptr())) return Param(value.cast<double>());
  if (PyUnicode_Check(value.ptr())) return Param(value.cast<std::string>());
  const PythonTypes& py_types = types();
  if (py::isinstance(value, py_types.decimal)) return Param(py::str(value).cast<std::string>());
  if (py::isinstance(value, py_types.uuid)) {
    const std::string raw = value.attr("bytes").cast<std::string>();
    Uuid::Bytes b{};
    std::copy(raw.begin(), raw.end(), b.begin());
    return Param(Uuid(b));
  }
  if (py::isinstance(value, py_types.datetime) || py::isinstance(value, py_types.date)) {
    return Param(value.attr("isoformat")().cast<std::string>());
  }
  if (PyDict_Check(value.ptr()) || PyList_Check(value.ptr())) {
    return Param(py_types.json_text(value).cast<std::string>());
  }
  throw py::type_error(fmt::format(
      "parameter ${}: a {} cannot be bound (use None, bool, int, float, str, Decimal, UUID, "
      "datetime, date, dict or list)",
      position, type_name(value)));
}

std::vector<Param> to_params(const py::tuple& values) {
  std::vector<Param> params;
  params.reserve(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) params.push_back(to_param(values[i], i + 1));
  return params;
}

py::object python_uuid(const Uuid& id) {
  const auto& b = id.bytes();
  return types().uuid(py::arg("bytes") =
                          py::bytes(reinterpret_cast<const char*>(b.data()), b.size()));
}

py::tuple to_python(const Rows& rows, Backend backend) {
  py::tuple names(rows.columns());
  for (std::size_t c = 0; c < rows.columns(); ++c) names[c] = py::str(rows.column_info()[c].name);
  py::list out(rows.size());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    py::tuple row(rows.columns());
    for (std::size_t c = 0; c < rows.columns(); ++c) row[c] = cell(rows, r, c, backend);
    out[r] = std::move(row);
  }
  return py::make_tuple(std::move(names), std::move(out), rows.affected());
}

}  // namespace idem::python
