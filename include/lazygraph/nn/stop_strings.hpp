#pragma once
/// \file
/// nn::StopStrings: ends generated text at the first of some strings, printing nothing of them.

#include <string>
#include <string_view>
#include <vector>

namespace lazygraph::nn {

/// Watches generated text, as it comes, for stop strings (lazygraph-run's `--stop`). What push() returns may be
/// printed at once: text that could be the beginning of a stop string is held back until the text after it shows
/// whether it is one. When one appears, push() returns the text before it, and stopped() is true from then on.
class StopStrings {
 public:
  /// \throws std::invalid_argument when a string is empty (it would stop before any text).
  explicit StopStrings(std::vector<std::string> stops);
  /// The text that can be printed now that `text` follows what came before; "" once stopped.
  [[nodiscard]] std::string push(std::string_view text);
  /// What is still held back, at the end of generation (no stop string came).
  [[nodiscard]] std::string finish();
  /// Whether a stop string appeared.
  [[nodiscard]] bool stopped() const noexcept { return stopped_; }
  /// The stop string that appeared (the first to be complete; of those complete at once, the one that began first),
  /// or "" while none did.
  [[nodiscard]] const std::string& which() const noexcept { return which_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;  ///< text not yet returned: a suffix that begins some stop string
  bool stopped_ = false;
  std::string which_;
};

}  // namespace lazygraph::nn
