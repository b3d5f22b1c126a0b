import { create } from "@bufbuild/protobuf";
import { type Duration, DurationSchema } from "@bufbuild/protobuf/wkt";

/** durationToMs returns d in milliseconds (0 for undefined). */
export function durationToMs(d: Duration | undefined): number {
  if (d === undefined) return 0;
  return Number(d.seconds) * 1000 + d.nanos / 1e6;
}

/** msToDuration returns ms as a protobuf Duration. */
export function msToDuration(ms: number): Duration {
  const whole = Math.trunc(ms);
  const seconds = Math.trunc(whole / 1000);
  const nanos = Math.round((ms - seconds * 1000) * 1e6);
  return create(DurationSchema, { seconds: BigInt(seconds), nanos });
}
