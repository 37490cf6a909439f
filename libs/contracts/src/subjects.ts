/**
 * Subject naming: TopicNameStrategy, `<topic>-value`, the default of Confluent's Java serializers
 * (`value.subject.name.strategy`), so Java, Go or Python clients with default settings read and write the same
 * subjects. A topic carrying several events registers one Avro union of their records under that subject.
 * Keys are plain UTF-8 strings (run id, entity key), not Avro, so any client can partition by them.
 */
export function subjectFor(physicalTopic: string): string {
  return `${physicalTopic}-value`;
}
