import {
  isUpgradedRunState,
  normalizeRunState,
  SEGMENT_ITEMS,
  type ItemSegment,
  type MapProgress,
  type RunState,
} from './reducer';

/**
 * How a run's state is written to the compacted state topic: one record for the run without its map items (the
 * core), and one record per segment of a map's items (`SEGMENT_ITEMS` items each). A snapshot writes the core and
 * only the segments that changed since the previous one, so its cost does not grow with the number of items.
 * Readers keep the latest core and segments of each run and put them together ({@link assembleRunState}).
 */
export interface SnapshotParts {
  /** JSON text of the run without its segments; each map's progress carries `segmentCount` instead. */
  core: string;
  /** The segments to write: all of them when there is no previous snapshot, else those whose identity changed. */
  segments: Array<{ mapId: string; index: number; text: string }>;
}

/** A map progress as written in the core record: its segments are records of their own. */
type CoreProgress = Omit<MapProgress, 'segments'> & { segmentCount: number };

/**
 * Splits `state` for writing. `previous` is the state the last written snapshot had (undefined: write every
 * segment); segments are immutable once shared (see `ItemSegment`), so identity tells what changed.
 */
export function snapshotParts(state: RunState, previous: RunState | undefined): SnapshotParts {
  // A previous state read in the older shape had its segments made in memory only: all of them are written.
  if (previous && isUpgradedRunState(previous)) previous = undefined;
  const steps: Record<string, unknown> = {};
  const segments: SnapshotParts['segments'] = [];
  for (const [id, st] of Object.entries(state.steps)) {
    if (!st.map) {
      steps[id] = st;
      continue;
    }
    const { segments: own, ...rest } = st.map;
    const core: CoreProgress = { ...rest, segmentCount: own.length };
    steps[id] = { ...st, map: core };
    const before = previous?.steps[id]?.map?.segments;
    own.forEach((seg, index) => {
      if (before?.[index] !== seg) segments.push({ mapId: id, index, text: JSON.stringify(seg) });
    });
  }
  return { core: JSON.stringify({ ...state, steps }), segments };
}

/** The key of a segment record: distinct from every run id (run ids have no `/`), on the run's partition. */
export const segmentKey = (runId: string, mapId: string, index: number) => `${runId}/${mapId}/${index}`;

/** The run a segment record's key names (see {@link segmentKey}), or undefined for a run's own key. */
export function runOfSegmentKey(key: string): string | undefined {
  return /^([^/]+)\/[^/]+\/\d+$/.exec(key)?.[1];
}

/**
 * A run's state from its core record's parsed JSON and its segments (`segment(mapId, index)`: the latest segment
 * record's parsed value, or undefined when none was written: the segment is then empty). A core written before
 * segments existed (items among the steps) is brought to the current shape. Returns a new object; `core` is used.
 */
export function assembleRunState(
  core: RunState,
  segment: (mapId: string, index: number) => ItemSegment | undefined,
): RunState {
  for (const [id, st] of Object.entries(core.steps)) {
    const progress = st.map as (MapProgress & Partial<CoreProgress>) | undefined;
    if (!progress || progress.segmentCount === undefined) continue;
    const segments: ItemSegment[] = [];
    for (let k = 0; k < progress.segmentCount; k++) {
      const size = Math.min(SEGMENT_ITEMS, progress.total - k * SEGMENT_ITEMS);
      segments.push(
        segment(id, k) ?? {
          steps: new Array(size).fill(null),
          outputs: new Array(size).fill(null),
        },
      );
    }
    delete progress.segmentCount;
    progress.segments = segments;
  }
  return normalizeRunState(core);
}
