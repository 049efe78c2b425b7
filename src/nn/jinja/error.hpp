#pragma once
/// \file
/// What the template engine throws: a problem with a template or its inputs, and where in the template it is.
/// ChatTemplate turns it into ChatTemplateError, naming the file. Private to src/nn.

#include <cstddef>
#include <stdexcept>
#include <string>

namespace lazygraph::nn::jinja {

/// A line and column of the template source, both from 1; line 0 when the problem has no place in the template
/// (an input that is not JSON).
struct Place {
  std::size_t line = 0;
  std::size_t column = 0;
};

/// A template the engine refuses, or a render that failed; what() is the problem alone, without the place.
class JinjaError : public std::runtime_error {
 public:
  JinjaError(Place place, const std::string& problem) : std::runtime_error(problem), place_(place) {}
  [[nodiscard]] Place place() const noexcept { return place_; }

 private:
  Place place_;
};

/// The template called raise_exception(message): the render stops with the template's own message.
class RaisedError : public JinjaError {
 public:
  using JinjaError::JinjaError;
};

}  // namespace lazygraph::nn::jinja
