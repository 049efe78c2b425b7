#pragma once
/// \file
/// The pieces a text is cut into while it is encoded, and cutting a piece where a pattern matches, with the
/// behaviours of `tokenizers`' SplitDelimiterBehavior. Offsets into the original text are not kept: nothing here
/// returns them; the one fact about them that changes ids (whether a piece begins the text: Metaspace's
/// prepend_scheme "first") is a flag.

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace lazygraph::nn::tokenizer {

/// A part of the text on its way to the model.
struct Piece {
  std::string text;
  bool at_start = false;  ///< whether it begins at the start of the original text
};

/// What becomes of the matches of a pattern when a piece is cut at them.
enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

/// A [start, end) range of a piece and whether the pattern matched it.
struct Segment {
  std::size_t start;
  std::size_t end;
  bool match;
};

/// The segments of a text of `size` bytes given the [start, end) ranges of its matches, non-overlapping and in
/// order: matches and the gaps between them, covering the text (one empty gap for an empty text).
[[nodiscard]] inline std::vector<Segment> segments_of(const std::vector<std::pair<std::size_t, std::size_t>>& matches,
                                                      std::size_t size) {
  std::vector<Segment> out;
  out.reserve(2 * matches.size() + 1);
  std::size_t previous = 0;
  for (const auto& [start, end] : matches) {
    if (previous != start) out.push_back({previous, start, false});
    out.push_back({start, end, true});
    previous = end;
  }
  if (previous != size || out.empty()) out.push_back({previous, size, false});
  return out;
}

/// Appends to `out` the parts of `piece` that `segments` (covering it) and `behavior` make, leaving out empty ones.
inline void split_piece(const Piece& piece, std::vector<Segment> segments, SplitBehavior behavior,
                        std::vector<Piece>& out) {
  std::vector<Segment> parts;  // (range, removed)
  parts.reserve(segments.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::isolated:
      for (const Segment& s : segments) parts.push_back({s.start, s.end, false});
      break;
    case SplitBehavior::removed:
      parts = std::move(segments);
      break;
    case SplitBehavior::contiguous:
      for (const Segment& s : segments) {
        if (s.match == previous_match && !parts.empty()) {
          parts.back().end = s.end;
        } else {
          parts.push_back({s.start, s.end, false});
        }
        previous_match = s.match;
      }
      break;
    case SplitBehavior::merged_with_previous:
      for (const Segment& s : segments) {
        if (s.match && !previous_match && !parts.empty()) {
          parts.back().end = s.end;
        } else {
          parts.push_back({s.start, s.end, false});
        }
        previous_match = s.match;
      }
      break;
    case SplitBehavior::merged_with_next:
      for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
        if (it->match && !previous_match && !parts.empty()) {
          parts.back().start = it->start;
        } else {
          parts.push_back({it->start, it->end, false});
        }
        previous_match = it->match;
      }
      std::reverse(parts.begin(), parts.end());
      break;
  }
  for (const Segment& p : parts) {
    if (p.match || p.end == p.start) continue;  // removed, or empty
    out.push_back({piece.text.substr(p.start, p.end - p.start), piece.at_start && p.start == 0});
  }
}

}  // namespace lazygraph::nn::tokenizer
