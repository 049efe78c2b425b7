#include "lazygraph/driver/error.hpp"

#include <string_view>
#include <utility>

namespace lazygraph {

namespace {

std::string describe(std::string_view api, std::string_view code_name, std::string_view code_text,
                     std::string_view object) {
  std::string msg;
  msg.append(api).append(" failed: ").append(code_name);
  if (!code_text.empty()) msg.append(" (").append(code_text).append(")");
  if (!object.empty()) msg.append(" [").append(object).append("]");
  return msg;
}

}  // namespace

ApiError::ApiError(std::string api, int code, std::string code_name, std::string_view detail, std::string object)
    : Error(describe(api, code_name, detail, object)),
      api_(std::move(api)),
      code_(code),
      code_name_(std::move(code_name)),
      object_(std::move(object)) {}

CompileError::CompileError(std::string file, std::string log)
    : Error("NVRTC failed to compile " + file + ":\n" + log), file_(std::move(file)), log_(std::move(log)) {}

}  // namespace lazygraph
