#pragma once
/// \file
/// nn::RequestError: a generation request that cannot be served as given (a field of an OpenAI request body, or a
/// request to nn::Engine), naming the field.

#include <string>
#include <string_view>

#include "lazygraph/driver/error.hpp"

namespace lazygraph::nn {

/// A request is malformed or asks for what cannot be served: the message is "<field>: <problem>", where the field is
/// the request's key as the client wrote it ("max_tokens", "messages[1].content", or "body" for the request as a
/// whole). A server answers it with a client error (HTTP 400), its message as given.
class RequestError : public Error {
 public:
  /// The error about `field`; the message is "<field>: <problem>".
  RequestError(std::string field, std::string_view problem);
  /// The field the problem is about ("body" for the whole request).
  [[nodiscard]] const std::string& field() const noexcept { return field_; }

 private:
  std::string field_;
};

}  // namespace lazygraph::nn
