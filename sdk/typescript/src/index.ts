export {
  DEFAULT_TOLERANCE_SECONDS,
  VERIFICATION_EVENT_TYPE,
  InvalidDelivery,
  parseHeaders,
  sign,
  verify,
  verifyEd25519,
} from "./webhook";
export type { Delivery, ErrorKind, HeadersLike, VerifyOptions } from "./webhook";
export { ApiError, PullConsumer, parsePage, retryAfterMs, splitPage } from "./pull";
export type { Page, PullOptions, PulledEvent, UnreadableItem } from "./pull";
export { HubClient, HubError, newId, retryAfter } from "./client";
export type { HubClientOptions, HubEvent } from "./client";
export * as api from "./api";
