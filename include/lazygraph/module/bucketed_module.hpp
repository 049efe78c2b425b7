#pragma once
/// \file
/// BucketedModule: a module over a run-time number of rows (a batch, a sequence length) that keeps one graph per
/// bucket — a few row counts that cover every count up to the largest — padding the input to the bucket and
/// returning the unpadded result, as vLLM and torch.compile do with batch sizes.
///
/// Its graphs live in a GraphCache (made on first use, the least recently used dropped past the capacity) and share
/// one GraphPool, so the scratch memory of forward passes that ask for it (Scope::scratch) is that of the largest
/// bucket, not the sum (graph_pool.hpp).
///
/// Thread safety: forward and forward_into may be called from several threads at once; an execution lock runs one
/// call at a time (the cache and each module's staging are shared).

#include <algorithm>
#include <cstddef>
#include <mutex>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "lazygraph/driver/error.hpp"
#include "lazygraph/graph/graph_cache.hpp"
#include "lazygraph/graph/graph_pool.hpp"
#include "lazygraph/module/module.hpp"

namespace lazygraph {

/// The shape of a BucketedModule's input and output, and its buckets.
struct BucketShape {
  /// The row counts there are graphs for, ascending: a call with r rows runs the graph of the smallest bucket >= r.
  std::vector<std::size_t> buckets;
  /// Input elements per row.
  std::size_t input_per_row = 0;
  /// Output elements per row.
  std::size_t output_per_row = 0;
  /// The most graphs kept at once (0: one per bucket).
  std::size_t capacity = 0;
};

/// A module from `rows × input_per_row` to `rows × output_per_row` elements for any rows up to the largest bucket
/// (see the file comment). `forward` pads the rows up to the bucket with `pad`, runs that bucket's GraphModule
/// (one replay, one wait) and returns the first rows of its output.
template <class In, class Out>
class BucketedModule {
 public:
  /// rows × input_per_row elements on the host.
  using Input = std::span<const In>;
  /// rows × output_per_row elements.
  using Output = std::vector<Out>;

  /// `build(rows, input, output)` returns the forward pass for `rows` rows as a GraphNode op, or
  /// `build(rows, scope, input, output)` records it (asking scope.scratch for intermediates). It is called once
  /// per bucket, when the bucket is first used; the graphs copy with `library`'s staging kernel (HostIo). Padding
  /// rows hold `pad`. `stream` and `library` must outlive the module (graphs are made later, on their first use);
  /// the module cannot be moved (its cache refers to it). \throws UsageError for no buckets, buckets not ascending or
  /// with 0, or 0 elements per row.
  template <class Build>
  BucketedModule(const Stream& stream, const KernelLibrary& library, BucketShape shape, Build build, In pad = In{})
      : BucketedModule(stream, &library, std::move(shape), std::move(build), pad) {}

  /// As above, with graphs that copy through memcpy nodes (HostIo(device, ...)): for a process without the core
  /// kernel library. `stream` must outlive the module.
  template <class Build>
  BucketedModule(const Stream& stream, BucketShape shape, Build build, In pad = In{})
      : BucketedModule(stream, nullptr, std::move(shape), std::move(build), pad) {}

  BucketedModule(const BucketedModule&) = delete;
  BucketedModule& operator=(const BucketedModule&) = delete;
  BucketedModule(BucketedModule&&) = delete;
  BucketedModule& operator=(BucketedModule&&) = delete;
  ~BucketedModule() = default;

  /// Runs `x` (rows × input_per_row elements) and returns rows × output_per_row elements.
  /// \throws UsageError when x is empty, not whole rows, or more rows than the largest bucket (naming the sizes).
  Output forward(Input x) {
    Output out(rows_of(x.size()) * shape_.output_per_row);
    forward_into(x, out);
    return out;
  }

  /// As forward, into `out` (rows × output_per_row elements). Allocates nothing once the bucket's graph exists: the
  /// padded input and output pass through staging vectors sized for the largest bucket (skipped when `rows` is a
  /// bucket), then through the GraphModule's pinned staging. \throws UsageError as forward, or when `out` has
  /// another size (naming both).
  void forward_into(Input x, std::span<Out> out) {
    const std::size_t rows = rows_of(x.size());
    if (out.size() != rows * shape_.output_per_row) {
      throw UsageError("BucketedModule: the output has " + std::to_string(out.size()) + " elements; " +
                       std::to_string(rows) + " rows need " + std::to_string(rows * shape_.output_per_row));
    }
    const std::size_t bucket = bucket_of(rows);
    const std::lock_guard<std::mutex> lock(mutex_);
    GraphModule<In, Out>& module = cache_.get(bucket);
    if (bucket == rows) {
      module.forward_into(x, out);
      return;
    }
    input_.assign(x.begin(), x.end());
    input_.resize(bucket * shape_.input_per_row, pad_);
    output_.resize(bucket * shape_.output_per_row);
    module.forward_into(input_, output_);
    std::copy_n(output_.begin(), out.size(), out.begin());
  }

  /// The bucket a call with `rows` rows runs: the smallest bucket >= rows.
  /// \throws UsageError for 0 rows or more than the largest bucket (naming both).
  [[nodiscard]] std::size_t bucket_of(std::size_t rows) const {
    if (rows == 0 || rows > shape_.buckets.back()) {
      throw UsageError("BucketedModule: " + std::to_string(rows) + " rows; the buckets hold 1 to " +
                       std::to_string(shape_.buckets.back()));
    }
    return *std::lower_bound(shape_.buckets.begin(), shape_.buckets.end(), rows);
  }
  /// The row counts there are graphs for, ascending.
  [[nodiscard]] std::span<const std::size_t> buckets() const noexcept { return shape_.buckets; }
  /// The shape it was made with (capacity filled in).
  [[nodiscard]] const BucketShape& shape() const noexcept { return shape_; }
  /// Hits, misses, graphs made and evictions of its graph cache.
  [[nodiscard]] GraphCacheStats stats() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return cache_.stats();
  }
  /// The graphs held now.
  [[nodiscard]] std::size_t graph_count() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return cache_.size();
  }
  /// The pool its graphs share (memory usage, trim).
  [[nodiscard]] const GraphPool& pool() const noexcept { return pool_; }

 private:
  template <class Build>
  BucketedModule(const Stream& stream, const KernelLibrary* library, BucketShape shape, Build build, In pad)
      : stream_(&stream),
        library_(library),
        shape_(checked(std::move(shape))),
        pool_(stream.device()),
        pad_(pad),
        cache_(shape_.capacity, pool_, maker(std::move(build))) {
    input_.reserve(shape_.buckets.back() * shape_.input_per_row);
    output_.reserve(shape_.buckets.back() * shape_.output_per_row);
  }

  /// Makes the GraphModule of a bucket, recorded into the cache's pool.
  template <class Build>
  typename GraphCache<std::size_t, GraphModule<In, Out>>::PooledMaker maker(Build build) const {
    return [this, build = std::move(build)](const std::size_t& rows, const GraphPool& pool) {
      GraphOptions options;
      options.pool = pool;
      return GraphModule<In, Out>(
          *stream_, io_for(rows),
          [build, rows](Scope& s, DeviceSpan<const In> x, DeviceSpan<Out> y) {
            if constexpr (std::is_invocable_v<const Build&, std::size_t, Scope&, DeviceSpan<const In>,
                                              DeviceSpan<Out>>) {
              build(rows, s, x, y);
            } else {
              s.record(build(rows, x, y));
            }
          },
          options);
    };
  }

  /// The pinned staging of a bucket's graph: copied by the library's staging kernel, or memcpy nodes without one.
  HostIo<In, Out> io_for(std::size_t rows) const {
    const std::size_t in = rows * shape_.input_per_row;
    const std::size_t out = rows * shape_.output_per_row;
    if (library_ != nullptr) return HostIo<In, Out>(*library_, in, out);
    return HostIo<In, Out>(stream_->device(), in, out);
  }

  static BucketShape checked(BucketShape shape) {
    if (shape.buckets.empty()) throw UsageError("BucketedModule: no buckets");
    if (!std::is_sorted(shape.buckets.begin(), shape.buckets.end()) || shape.buckets.front() == 0 ||
        std::adjacent_find(shape.buckets.begin(), shape.buckets.end()) != shape.buckets.end()) {
      throw UsageError("BucketedModule: buckets must be ascending, distinct and at least 1");
    }
    if (shape.input_per_row == 0 || shape.output_per_row == 0) {
      throw UsageError("BucketedModule: input_per_row and output_per_row must be at least 1");
    }
    if (shape.capacity == 0) shape.capacity = shape.buckets.size();
    return shape;
  }

  std::size_t rows_of(std::size_t elements) const {
    if (elements == 0 || elements % shape_.input_per_row != 0) {
      throw UsageError("BucketedModule: the input has " + std::to_string(elements) +
                       " elements, which is not a whole number of rows of " + std::to_string(shape_.input_per_row) +
                       " (and at least one)");
    }
    return elements / shape_.input_per_row;
  }

  const Stream* stream_ = nullptr;          ///< the caller's: it outlives the module
  const KernelLibrary* library_ = nullptr;  ///< the caller's, or null (memcpy staging)
  BucketShape shape_;
  GraphPool pool_;
  In pad_;
  GraphCache<std::size_t, GraphModule<In, Out>> cache_;
  std::vector<In> input_;     ///< the padded input of the call in progress
  std::vector<Out> output_;   ///< the padded output
  mutable std::mutex mutex_;  ///< the execution lock: the cache and the staging vectors are shared by every call
};

}  // namespace lazygraph
