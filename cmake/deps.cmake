# Every third-party dependency is imported here, once, from Debian packages.
# librdkafka, libpq and sqlite3 ship only pkg-config files on Debian 12, so they
# become IMPORTED targets through pkg_check_modules(... IMPORTED_TARGET).
find_package(PkgConfig REQUIRED)
pkg_check_modules(RDKAFKA REQUIRED IMPORTED_TARGET rdkafka>=2.0)
pkg_check_modules(LIBPQ REQUIRED IMPORTED_TARGET libpq>=14)
pkg_check_modules(SQLITE3 REQUIRED IMPORTED_TARGET sqlite3>=3.35)  # RETURNING needs 3.35
# OpenSSL's libcrypto: SHA-256 of a truncated dead letter's payload (librdkafka links it too).
pkg_check_modules(LIBCRYPTO REQUIRED IMPORTED_TARGET libcrypto>=3.0)
# cpp-httplib: Debian builds it as a shared library; its pkg-config file carries the
# defines (OpenSSL, zlib, brotli support) the header must be compiled with.
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib>=0.11)
find_package(CURL REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)  # provider/client bodies, JSON log lines
find_package(simdjson REQUIRED)
find_package(tomlplusplus REQUIRED)  # the configuration file (TOML)
find_package(prometheus-cpp REQUIRED COMPONENTS core)  # metrics registry and text format
find_package(fmt REQUIRED)
find_package(Threads REQUIRED)
if(IDEM_BUILD_CLI)
  find_package(CLI11 REQUIRED)
endif()
if(IDEM_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(IDEM_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
