#include <algorithm>
#include <string>
#include <vector>

#include "storage_format.hpp"

namespace lazygraph::nn::detail {

extern const StorageFormat int8_channel_format;
extern const StorageFormat int4_group_format;
extern const StorageFormat fp8_block_format;

std::span<const StorageFormat* const> storage_formats() noexcept {
  static const StorageFormat* const all[] = {&int8_channel_format, &int4_group_format, &fp8_block_format};
  return all;
}

const StorageFormat* find_storage_format(WeightFormat kind) noexcept {
  const auto all = storage_formats();
  const auto found = std::find_if(all.begin(), all.end(), [&](const StorageFormat* f) { return f->kind == kind; });
  return found == all.end() ? nullptr : *found;
}

namespace {
/// "a", "a or b", "a, b or c".
std::string one_of(const std::vector<std::string>& items) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += i + 1 == items.size() ? " or " : ", ";
    out += items[i];
  }
  return out;
}
}  // namespace

std::string listed(std::span<const int> numbers) {
  std::vector<std::string> items;
  for (const int n : numbers) items.push_back(std::to_string(n));
  return one_of(items);
}

std::string listed_names() {
  std::vector<std::string> items;
  for (const StorageFormat* f : storage_formats()) items.push_back("\"" + std::string(f->name) + "\"");
  return one_of(items);
}

bool forbidden(const StorageFormat& format, std::uint8_t byte) noexcept {
  return format.forbidden_byte >= 0 && (byte & format.forbidden_mask) == static_cast<unsigned>(format.forbidden_byte);
}

std::string forbidden_value_at(const StorageFormat& format, std::size_t at, std::uint8_t byte) {
  return std::string(format.name) + " value at byte " + std::to_string(at) + " is " + std::to_string(byte) + ", " +
         std::string(format.forbidden_why);
}

}  // namespace lazygraph::nn::detail
