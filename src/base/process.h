#pragma once
// Process-level facts and limits a server, a load generator or a test needs.
#include <cstdint>
#include <sys/types.h>

namespace deepinfer {

// Lets the process hold as many descriptors (sockets) as its hard limit allows.
void raise_descriptor_limit();

// Resident memory of process `pid` in KiB (/proc), -1 when unknown.
int64_t resident_kib(pid_t pid);

}  // namespace deepinfer
