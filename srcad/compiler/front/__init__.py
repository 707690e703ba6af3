"""From Python source to IR: parsing, name resolution, the fence, lowering and inlining."""
