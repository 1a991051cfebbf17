#pragma once
// Values across the binding: a Python object as a bound parameter, a result cell as the
// Python object of its type. Called with the GIL held.
#include <pybind11/pybind11.h>

#include <vector>

#include "idem/store.hpp"

namespace idem::python {

/// `value` as the Param the store binds: None, bool, int (64-bit; a larger one binds as
/// its decimal text), float, str, decimal.Decimal (its exact text), uuid.UUID,
/// datetime/date (ISO 8601 text), dict or list (JSON text, Decimals as exact numbers).
/// \throws TypeError naming the placeholder (`$position`) and the type for anything else.
[[nodiscard]] Param to_param(const pybind11::handle& value, std::size_t position);

/// Every element of `values` (a tuple of a call's parameters) as a Param.
[[nodiscard]] std::vector<Param> to_params(const pybind11::tuple& values);

/// `id` as a uuid.UUID.
[[nodiscard]] pybind11::object python_uuid(const Uuid& id);

/// `rows` as (column names, list of tuples, rows affected), each cell the Python object of
/// its type: None, int, decimal.Decimal, float, bool, uuid.UUID, datetime.datetime,
/// the parsed JSON (numbers with a fraction as Decimal), bytes (`backend` says how a
/// store prints them), str.
[[nodiscard]] pybind11::tuple to_python(const Rows& rows, Backend backend);

}  // namespace idem::python
