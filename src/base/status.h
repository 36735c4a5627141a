#pragma once
// Status and Result<T> for failures a caller is expected to handle (bad user input, no room in a
// cache): no exceptions across these APIs.
#include <optional>
#include <string>
#include <utility>

namespace deepinfer {

enum class StatusCode { kOk, kInvalidArgument, kNotFound, kResourceExhausted, kFailedPrecondition, kCancelled, kInternal };

class Status {
public:
    Status() = default;
    Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
    static Status ok() { return {}; }
    static Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }

    bool is_ok() const { return code_ == StatusCode::kOk; }
    StatusCode code() const { return code_; }
    const std::string& message() const { return message_; }

private:
    StatusCode code_ = StatusCode::kOk;
    std::string message_;
};

template <typename T>
class Result {
public:
    Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit on purpose
    Result(Status status) : status_(std::move(status)) {}  // NOLINT

    bool ok() const { return value_.has_value(); }
    const Status& status() const { return status_; }
    T& value() & { return *value_; }
    const T& value() const& { return *value_; }
    T&& value() && { return std::move(*value_); }
    T* operator->() { return &*value_; }
    const T* operator->() const { return &*value_; }
    T& operator*() { return *value_; }

private:
    std::optional<T> value_;
    Status status_;
};

}  // namespace deepinfer
