#include "base/process.h"

#include <sys/resource.h>

#include <fstream>
#include <string>

namespace deepinfer {

void raise_descriptor_limit() {
    rlimit lim{};
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
        lim.rlim_cur = lim.rlim_max;
        setrlimit(RLIMIT_NOFILE, &lim);
    }
}

int64_t resident_kib(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    std::string key;
    while (in >> key)
        if (key == "VmRSS:") {
            int64_t v = -1;
            in >> v;
            return v;
        }
    return -1;
}

}  // namespace deepinfer
