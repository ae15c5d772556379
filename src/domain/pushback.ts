// How a webhook's receiver says "not now, I am busy": 429 Too Many Requests or 503 Service Unavailable.
// Such an answer is a pushback, not a failure, while the endpoint still answers 2xx now and then (see
// src/delivery/attempt-outcome.ts): the delivery waits a moment, or its Retry-After, which only these
// two statuses are read for (src/delivery/http-sender.ts).

export function isPushbackStatus (status: number | undefined): boolean {
  return status === 429 || status === 503
}
