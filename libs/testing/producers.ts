/**
 * `@keyflow/testing/producers`: a team's producers and admin tools (./src/producers: the Java client's ConsoleProducer,
 * kcat, Kafka's TopicCommand and ConsumerGroupCommand) without the containers and clients the package's main entry
 * loads.
 */
export * from './src/producers';
