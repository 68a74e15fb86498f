// The merge loop both tokenizers share: symbols of a text in a linked list, the adjacent pair with the
// highest priority merged first (ties: the leftmost), until no adjacent pair can merge. SentencePiece
// ranks pairs by the merged token's score, byte-level BPE by its merge rank.
#pragma once

#include <cstddef>
#include <optional>
#include <queue>
#include <vector>

namespace tokenhost {

struct MergeSymbol {
  int prev, next;         // neighbours, -1 at the ends
  size_t offset, length;  // bytes of the text; length 0: merged into its left neighbour
};

// priority(left, right) -> std::optional<P>: the priority of merging symbols[left] and symbols[right]
// (larger merges first), or nullopt when they cannot merge.
template <class Priority>
void merge_symbols(std::vector<MergeSymbol>& symbols, Priority priority) {
  using P = typename decltype(priority(0, 0))::value_type;
  struct Pair {
    P priority;
    int left, right;
    size_t length;
  };
  auto lower = [](const Pair& a, const Pair& b) {
    return a.priority < b.priority || (!(b.priority < a.priority) && a.left > b.left);
  };
  std::priority_queue<Pair, std::vector<Pair>, decltype(lower)> queue(lower);
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    if (auto p = priority(left, right))
      queue.push({*p, left, right, symbols[size_t(left)].length + symbols[size_t(right)].length});
  };
  for (int i = 1; i < int(symbols.size()); ++i) try_add(i - 1, i);
  while (!queue.empty()) {
    const Pair top = queue.top();
    queue.pop();
    MergeSymbol& left = symbols[size_t(top.left)];
    MergeSymbol& right = symbols[size_t(top.right)];
    // Stale when either side has merged since (a symbol's offset never moves, so the length tells).
    if (left.length == 0 || right.length == 0 || left.length + right.length != top.length) continue;
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[size_t(right.next)].prev = top.left;
    try_add(left.prev, top.left);
    try_add(top.left, left.next);
  }
}

}  // namespace tokenhost
