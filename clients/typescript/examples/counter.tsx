// The pattern the example page deploys: a number and a stream that adds
// to it.
import { pattern, handler, Cell, Default } from "commonfabric";

const increment = handler<{ amount?: number }, { value: Cell<number> }>((event, { value }) => {
  value.set(value.get() + (event?.amount ?? 1));
});

export default pattern<{ value: Default<number, 0> }>(({ value }) => ({
  value,
  increment: increment({ value }),
}));
