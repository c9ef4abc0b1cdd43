// Status and Result<T>: errors as values at every module boundary. The codes
// are the wire's ErrorCode enum, generated from proto/kvstash.fbs.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "kvstash/wire_enums.h"

namespace kvstash {

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) {
    return {StatusCode::kInvalidArgument, std::move(m)};
  }
  static Status Malformed(std::string m) { return {StatusCode::kMalformedMessage, std::move(m)}; }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
  static Status TooLarge(std::string m) { return {StatusCode::kTooLarge, std::move(m)}; }
  static Status Exhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status DeviceError(std::string m) { return {StatusCode::kDeviceError, std::move(m)}; }
  static Status TimedOut(std::string m) { return {StatusCode::kTimedOut, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  static Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "OutOfRange: block id 5000 out of range [0, 4096) ..."
  std::string ToString() const {
    return ok() ? "Ok" : std::string(NameOf(code_)) + ": " + message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)), status_() {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}     // NOLINT: implicit by design

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }  // Ok when there is a value
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }
  const T& operator*() const { return *value_; }

 private:
  std::optional<T> value_;
  Status status_ = Status::Internal("Result holds no value");
};

}  // namespace kvstash

// Returns early from the enclosing function with a failed Status.
#define KVSTASH_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::kvstash::Status kvstash_status_ = (expr);        \
    if (!kvstash_status_.ok()) return kvstash_status_; \
  } while (0)
