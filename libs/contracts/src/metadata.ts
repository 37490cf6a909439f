import { randomUUID } from 'node:crypto';
import { EVENT_VERSIONS, type EventMetadata, type EventName } from '@keyflow/schemas';

export interface MetadataInput {
  /** The ordering (partition) key the event is produced with. */
  key: string;
  /** The run this event belongs to. */
  correlationId: string;
  /** eventId of the event that caused this one; omit for an external trigger. */
  causationId?: string | null;
  /** W3C traceparent / tracestate to carry (https://www.w3.org/TR/trace-context/). */
  traceparent?: string | null;
  tracestate?: string | null;
  /** When it happened, ms since epoch (default: now). */
  occurredAt?: number;
  /** Event id (default: a random UUID). Give a deterministic one when re-emitting the same fact. */
  eventId?: string;
}

/** Builds the metadata every event carries; eventType and schemaVersion come from the generated contracts. */
export function newMetadata(event: EventName, input: MetadataInput): EventMetadata {
  return {
    eventId: input.eventId ?? randomUUID(),
    eventType: event,
    schemaVersion: EVENT_VERSIONS[event],
    occurredAt: input.occurredAt ?? Date.now(),
    key: input.key,
    correlationId: input.correlationId,
    causationId: input.causationId ?? null,
    traceparent: input.traceparent ?? null,
    tracestate: input.tracestate ?? null,
  };
}
