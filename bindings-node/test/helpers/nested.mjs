// An array nested `n` levels deep ([[[…]]]): the deep-nesting value of the bad-input tests.
export function nested(n) {
  const top = [];
  let x = top;
  for (let i = 1; i < n; i += 1) {
    const y = [];
    x.push(y);
    x = y;
  }
  return top;
}
