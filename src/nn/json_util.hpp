#pragma once
/// \file
/// Private helpers of src/nn: reading a small text file and parsing JSON strictly (syntax errors, duplicate
/// keys, NUL bytes and nesting deeper than a small limit become CheckpointError naming the file). Not installed; only
/// src/nn/*.cpp include it.
///
/// Hostile input is the case these helpers are written for: reading refuses anything but a regular file (a FIFO
/// would block, a device would never end) and stops at a size limit; parsing is one pass over the text, O(n log n)
/// in the number of keys, never builds a value nested deeper than the limit, so that nothing recursive in nlohmann
/// (dump(), comparisons, copies) can overflow the stack on a value this parser returned, and stops at a count of
/// values, so that a text of one huge flat array cannot make it build gigabytes (a value of the DOM costs 16 bytes
/// and more where the text spends 2). A safetensors header is read member by member (parse_json_members): only one
/// tensor's entry is ever held as JSON.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <lazygraph/nn/checkpoint_error.hpp>

#include "printable.hpp"

namespace lazygraph::nn::detail {

/// The most bytes read_text_file reads by default: 16 MiB, far more than any real config.json (a few kB).
inline constexpr std::size_t kMaxConfigBytes = std::size_t{16} << 20U;

/// The deepest nesting of arrays and objects parse_json_strict accepts by default (real checkpoint files nest
/// fewer than 5 levels).
inline constexpr std::size_t kMaxJsonDepth = 64;

/// The most JSON values a config.json may hold: 65536 (real ones hold a few hundred; each value costs up to about 100
/// bytes once parsed, so this bounds what a hostile file of 16 MiB can make the parser build).
inline constexpr std::size_t kMaxConfigValues = std::size_t{1} << 16U;

/// The text of errno's current value, e.g. "No such file or directory" (thread-safe, unlike strerror).
inline std::string errno_text(int error) { return std::error_code(error, std::generic_category()).message(); }

/// What a file of mode `mode` is, for messages: "a folder", "a FIFO", ...
inline std::string_view file_kind(mode_t mode) noexcept {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "an unknown kind of file";
}

/// Closes a file descriptor when it goes out of scope.
class FdGuard {
 public:
  explicit FdGuard(int fd) noexcept : fd_(fd) {}
  FdGuard(FdGuard&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  FdGuard& operator=(FdGuard&&) = delete;
  ~FdGuard() { close(); }
  [[nodiscard]] int get() const noexcept { return fd_; }
  /// Closes now; returns ::close's result (0, or -1 with errno set).
  int close() noexcept {
    const int result = fd_ >= 0 ? ::close(fd_) : 0;
    fd_ = -1;
    return result;
  }

 private:
  int fd_;
};

/// Opens `path` for reading without blocking (a FIFO without a writer would block open() forever) and checks that
/// it is a regular file. Returns the descriptor and the file's size as fstat saw it. Throws CheckpointError naming
/// `path` with strerror when it cannot be opened or stat'ed, or "is not a regular file (a FIFO)" and the like.
inline std::pair<FdGuard, std::size_t> open_regular_file(const std::filesystem::path& path) {
  FdGuard fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (fd.get() < 0) throw CheckpointError(path, "", "cannot open: " + errno_text(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw CheckpointError(path, "", "cannot stat: " + errno_text(errno));
  if (!S_ISREG(st.st_mode)) {
    throw CheckpointError(path, "", "is not a regular file (" + std::string(file_kind(st.st_mode)) + ")");
  }
  return {std::move(fd), static_cast<std::size_t>(st.st_size)};
}

/// The whole content of `path`, a regular file of at most `max_bytes` bytes. Throws CheckpointError naming the file
/// when it cannot be opened or read (with strerror), is not a regular file (a FIFO, a device such as /dev/zero, a
/// folder), or holds more than `max_bytes` bytes (checked on the size fstat gives and again while reading, for
/// files whose size fstat does not know).
inline std::string read_text_file(const std::filesystem::path& path, std::size_t max_bytes = kMaxConfigBytes) {
  auto [fd, size] = open_regular_file(path);
  const auto too_large = [&] {
    constexpr std::size_t kMiB = std::size_t{1} << 20U;
    const std::string mib = max_bytes % kMiB == 0 ? " (" + std::to_string(max_bytes / kMiB) + " MiB)" : "";
    return CheckpointError(path, "", "is larger than the " + std::to_string(max_bytes) + " bytes allowed" + mib);
  };
  if (size > max_bytes) throw too_large();
  std::string text;
  text.reserve(size);
  char buffer[65536];
  for (;;) {
    const ssize_t got = ::read(fd.get(), buffer, sizeof buffer);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw CheckpointError(path, "", "cannot read: " + errno_text(errno));
    }
    if (got == 0) break;
    if (static_cast<std::size_t>(got) > max_bytes - text.size()) throw too_large();
    text.append(buffer, static_cast<std::size_t>(got));
  }
  return text;
}

namespace json_detail {

inline constexpr std::size_t kDescribeMax = 60;

inline std::string dump_scalar(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// Appends the compact JSON text of `value` to `out`, stopping soon after `out` exceeds `limit` characters, so
/// that describing a huge value costs little. Recursion depth is that of `value`: callers pass values that
/// parse_json_strict returned, which are nested at most its depth limit.
inline void describe_into(const nlohmann::json& value, std::string& out, std::size_t limit) {
  if (out.size() > limit) return;
  if (value.is_string()) {
    const auto& text = value.get_ref<const std::string&>();
    // Twice the limit of bytes is enough: dumping never makes a string shorter; a UTF-8 sequence cut at the end
    // shows as U+FFFD past the cut of the message.
    out += dump_scalar(text.size() > 2 * limit ? nlohmann::json(text.substr(0, 2 * limit)) : value);
  } else if (value.is_object()) {
    out += '{';
    bool first = true;
    for (const auto& [key, member] : value.items()) {
      if (out.size() > limit) return;
      if (!first) out += ',';
      first = false;
      describe_into(nlohmann::json(key), out, limit);
      out += ':';
      describe_into(member, out, limit);
    }
    out += '}';
  } else if (value.is_array()) {
    out += '[';
    bool first = true;
    for (const nlohmann::json& element : value) {
      if (out.size() > limit) return;
      if (!first) out += ',';
      first = false;
      describe_into(element, out, limit);
    }
    out += ']';
  } else {
    out += dump_scalar(value);
  }
}

/// A SAX handler for nlohmann::json::sax_parse that builds the value itself, refusing (by stopping the parse) a
/// duplicate key, nesting deeper than `max_depth`, more than `max_values` values (each array, object, string, number,
/// boolean and null counts one) and syntax errors, and recording which of them it was.
///
/// With `on_member` given and an object at the top, the members of that object are not kept: each member's value is
/// built alone, handed to on_member(key, value) as soon as it is complete, and dropped, and `max_values` bounds each
/// member's value instead of the whole text. Only the member being read is ever held, so a caller that keeps a small
/// summary of each member uses memory bounded by that summary and one member, however large the text.
class StrictBuilder {
 public:
  using json = nlohmann::json;
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;
  using MemberHandler = std::function<void(const std::string& key, json& value)>;

  StrictBuilder(std::size_t max_depth, std::size_t max_values, MemberHandler on_member = {})
      : max_depth_(max_depth), max_values_(max_values), on_member_(std::move(on_member)) {}

  bool null() { return put(nullptr); }
  bool boolean(bool value) { return put(value); }
  bool number_integer(number_integer_t value) { return put(value); }
  bool number_unsigned(number_unsigned_t value) { return put(value); }
  bool number_float(number_float_t value, const string_t& /*text*/) { return put(value); }
  bool string(string_t& value) { return put(std::move(value)); }
  bool binary(binary_t& value) { return put(json::binary(std::move(value))); }  // not produced by JSON text
  bool start_object(std::size_t /*elements*/) { return open(json::value_t::object); }
  bool start_array(std::size_t /*elements*/) { return open(json::value_t::array); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(string_t& name) {
    if (at_member_level()) {
      if (!member_keys_.insert(name).second) return found_duplicate(name);
      member_key_ = std::move(name);
      member_ = json();
      slot_ = &member_;
      values_ = 0;  // the budget is each member's
      return true;
    }
    auto& object = open_.back()->get_ref<json::object_t&>();
    const auto [it, inserted] = object.try_emplace(std::move(name));  // std::map: O(log n), no rescan
    if (!inserted) return found_duplicate(it->first);
    slot_ = &it->second;
    return true;
  }

  bool parse_error(std::size_t /*position*/, const std::string& /*token*/, const json::exception& error) {
    syntax_error = error.what();
    return false;
  }

  json root;  // the value, once sax_parse returned true (with on_member, an empty object when the top is an object)
  std::optional<std::string> syntax_error;  // nlohmann's message
  std::optional<std::string> duplicate;     // the first key found twice in one object
  bool duplicate_at_top = false;            // whether that object is the top-level one
  bool too_deep = false;                    // nesting went past max_depth
  bool too_many = false;                    // more than max_values values (in one member, with on_member)
  std::optional<std::string> member;        // with on_member: the member being read when the parse stopped
  std::exception_ptr member_error;          // what on_member threw; the parse stopped there

 private:
  /// Whether the next key names a member of the top-level object that on_member receives.
  [[nodiscard]] bool at_member_level() const noexcept { return members_ && open_.size() == 1; }

  bool found_duplicate(const std::string& name) {
    duplicate = name;
    duplicate_at_top = open_.size() == 1;
    return false;
  }

  /// Counts one more value against the budget.
  bool count() {
    if (++values_ <= max_values_) return true;
    too_many = true;
    if (members_) member = member_key_;
    return false;
  }

  /// Where the next value goes: the root, a new element of the innermost array, or the slot of the last key.
  json* place() {
    if (open_.empty()) return &root;
    json& container = *open_.back();
    if (container.is_array()) {
      auto& array = container.get_ref<json::array_t&>();
      array.emplace_back();
      return &array.back();
    }
    return slot_;
  }

  template <class Value>
  bool put(Value&& value) {
    if (!count()) return false;
    *place() = json(std::forward<Value>(value));
    return !at_member_level() || deliver();
  }

  bool open(json::value_t type) {
    if (open_.size() >= max_depth_) {
      too_deep = true;
      return false;
    }
    if (!count()) return false;
    if (open_.empty()) members_ = on_member_ && type == json::value_t::object;
    json* container = place();
    *container = json(type);
    open_.push_back(container);  // stable: later values only go into this container or deeper ones
    return true;
  }

  bool close() {
    open_.pop_back();
    return !at_member_level() || deliver();
  }

  /// Hands the member just completed to on_member, then drops it.
  bool deliver() {
    try {
      on_member_(member_key_, member_);
    } catch (...) {
      member_error = std::current_exception();
      member = member_key_;
      return false;
    }
    member_ = json();
    return true;
  }

  std::size_t max_depth_;
  std::size_t max_values_;
  MemberHandler on_member_;
  std::vector<json*> open_;                         // the arrays and objects not yet closed, outermost first
  json* slot_ = nullptr;                            // the value of the last key of the innermost object
  std::size_t values_ = 0;                          // counted against max_values_
  bool members_ = false;                            // whether the top-level object's members go to on_member_
  std::set<std::string, std::less<>> member_keys_;  // the members seen so far
  std::string member_key_;                          // the member being read
  json member_;                                     // its value
};

/// Runs `builder` over `text` and throws the first problem it recorded, as parse_json_strict describes.
inline void run_strict(StrictBuilder& builder, std::string_view text, const std::filesystem::path& file,
                       std::string_view what, bool keys_are_tensors, std::size_t max_depth, std::size_t max_values) {
  if (const std::size_t nul = text.find('\0'); nul != std::string_view::npos) {
    throw CheckpointError(
        file, "", std::string(what) + " is not valid JSON: it holds a NUL byte at offset " + std::to_string(nul));
  }
  bool parsed = false;
  try {
    parsed = nlohmann::json::sax_parse(text.begin(), text.end(), &builder);
  } catch (const nlohmann::json::exception& e) {  // not expected: the handler reports errors; kept for safety
    throw CheckpointError(file, "", std::string(what) + " is not valid JSON: " + e.what());
  }
  if (builder.member_error) std::rethrow_exception(builder.member_error);
  if (builder.too_deep) {
    throw CheckpointError(
        file, "",
        std::string(what) + " nests deeper than " + std::to_string(max_depth) + " levels of arrays and objects");
  }
  if (builder.duplicate.has_value()) {
    if (builder.duplicate_at_top && keys_are_tensors) {
      throw CheckpointError(file, *builder.duplicate, "the name appears twice in " + std::string(what));
    }
    throw CheckpointError(
        file, "", std::string(what) + " has the key '" + printable(*builder.duplicate) + "' twice in one object");
  }
  if (builder.too_many) {
    const std::string limit = std::to_string(max_values) + " JSON values";
    if (!builder.member.has_value()) {
      throw CheckpointError(file, "",
                            std::string(what) + " holds more than " + limit +
                                " (each array, object, string, number, true, false and null counts one)");
    }
    if (keys_are_tensors) {
      throw CheckpointError(file, *builder.member, "its entry in " + std::string(what) + " holds more than " + limit);
    }
    throw CheckpointError(
        file, "", std::string(what) + "'s member '" + printable(*builder.member) + "' holds more than " + limit);
  }
  if (!parsed || builder.syntax_error.has_value()) {
    throw CheckpointError(file, "",
                          std::string(what) + " is not valid JSON: " +
                              builder.syntax_error.value_or("the parser stopped without a reason"));
  }
}

}  // namespace json_detail

/// A JSON value as messages show it: its compact text (strings quoted), cut to about 60 characters. Costs little
/// however large the value; `value` must be nested no deeper than a value parse_json_strict returns.
inline std::string describe_json(const nlohmann::json& value) {
  std::string text;
  json_detail::describe_into(value, text, json_detail::kDescribeMax);
  if (text.size() > json_detail::kDescribeMax) text = text.substr(0, json_detail::kDescribeMax) + "...";
  return text;
}

/// The JSON value of `text`, parsed in one pass (O(n log n) in the number of keys). Throws CheckpointError naming
/// `file` when `text` is not JSON (nlohmann's message included), holds a NUL byte (nlohmann would stop reading
/// there and accept what follows), nests arrays and objects deeper than `max_depth` levels (the top-level value
/// is level 1; checked while parsing, so no deeper value is ever built), holds more than `max_values` values (each
/// array, object, string, number, boolean and null counts one; checked while parsing, so memory stays within about
/// 100 bytes a value), or an object repeats a key (naming the key; for a key of the top-level object, it is also
/// reported as the tensor when `keys_are_tensors`). `what` names the text in messages, e.g. "the index".
inline nlohmann::json parse_json_strict(std::string_view text, const std::filesystem::path& file, std::string_view what,
                                        bool keys_are_tensors, std::size_t max_values,
                                        std::size_t max_depth = kMaxJsonDepth) {
  json_detail::StrictBuilder builder(max_depth, max_values);
  json_detail::run_strict(builder, text, file, what, keys_are_tensors, max_depth, max_values);
  return std::move(builder.root);
}

/// parse_json_strict for a text whose top-level value is an object of many members (a safetensors header): each
/// member's value is built alone, handed to on_member(key, value) as soon as it is complete and dropped, so that
/// memory is what on_member keeps plus one member, and `max_member_values` bounds each member's values (the one
/// over it is named: as the tensor when `keys_are_tensors`). What on_member throws stops the parse and propagates.
/// Returns an empty object when the top-level value is an object; else that value (at most max_member_values values,
/// or the first max_member_values of them when there are more: enough to describe it), which the caller refuses.
inline nlohmann::json parse_json_members(std::string_view text, const std::filesystem::path& file,
                                         std::string_view what, bool keys_are_tensors, std::size_t max_member_values,
                                         const json_detail::StrictBuilder::MemberHandler& on_member,
                                         std::size_t max_depth = kMaxJsonDepth) {
  json_detail::StrictBuilder builder(max_depth, max_member_values, on_member);
  try {
    json_detail::run_strict(builder, text, file, what, keys_are_tensors, max_depth, max_member_values);
  } catch (const CheckpointError&) {
    if (!builder.too_many || builder.member.has_value()) throw;
    return std::move(builder.root);  // not an object, and large: the caller describes its beginning
  }
  return std::move(builder.root);
}

}  // namespace lazygraph::nn::detail
