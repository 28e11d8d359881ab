import { Injectable } from '@nestjs/common';

export interface ChargeRequest {
  /** The deduplication key: the same key never charges twice. */
  idempotencyKey: string;
  customerId: string;
  amountCents: number;
  simulateLostResponse?: boolean;
}

export interface Charge {
  chargeId: string;
  idempotencyKey: string;
  customerId: string;
  amountCents: number;
}

/** The charge was made, but its response never arrived: the caller cannot tell whether it happened. */
export class GatewayTimeoutError extends Error {
  override readonly name = 'GatewayTimeoutError';
}

/**
 * An in-memory stand-in for a payment provider with idempotency keys (as Stripe, Adyen and most
 * payment APIs offer): a repeated request with a known key returns the first charge and charges
 * nothing. `charges()` holds one entry per effect, so a test (or `GET /payments/charges`) can check
 * that a retried job charged once.
 */
@Injectable()
export class FakePaymentGateway {
  private readonly byKey = new Map<string, Charge>();
  private readonly calls = new Map<string, number>();
  private nextId = 1;

  async charge(request: ChargeRequest, signal?: AbortSignal): Promise<Charge> {
    signal?.throwIfAborted();
    this.calls.set(request.idempotencyKey, (this.calls.get(request.idempotencyKey) ?? 0) + 1);
    const existing = this.byKey.get(request.idempotencyKey);
    if (existing) return existing;
    const charge: Charge = {
      chargeId: `ch_${this.nextId++}`,
      idempotencyKey: request.idempotencyKey,
      customerId: request.customerId,
      amountCents: request.amountCents,
    };
    this.byKey.set(request.idempotencyKey, charge);
    if (request.simulateLostResponse) throw new GatewayTimeoutError('the gateway did not answer in time');
    return charge;
  }

  /** Every effect, one per idempotency key. */
  charges(): Charge[] {
    return [...this.byKey.values()];
  }

  /** How many requests arrived with this key (retries included). */
  callsFor(idempotencyKey: string): number {
    return this.calls.get(idempotencyKey) ?? 0;
  }
}
