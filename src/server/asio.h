#pragma once
// Boost.Asio / Beast for the server. Boost 1.74's asio/awaitable.hpp uses std::exchange without
// including <utility>, which C++20 builds with g++ 12 then miss: include it first.
#include <utility>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
