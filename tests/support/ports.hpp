#pragma once
// Ports for servers a test starts and may restart on the same port (a private PostgreSQL
// cluster, chromedriver).

namespace idem::test {

/// A loopback port nobody listens on now, chosen below the kernel's ephemeral range
/// (/proc/sys/net/ipv4/ip_local_port_range). A port from that range can be taken at any
/// moment as the local port of some outgoing connection (with many tests running at once
/// there are thousands), and a server restarted on it then fails with "address already
/// in use"; below it, only another server's explicit choice could collide, and the
/// choice is random. \throws std::runtime_error when no such port binds after many tries.
int unused_listen_port();

}  // namespace idem::test
